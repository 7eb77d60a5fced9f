//! The page shell: skip link, the header with the sections and the
//! sign-out form, the main landmark, the footer. Every page is built here.

use maud::{DOCTYPE, Markup, html};
use zm_store::web::WebSession;

use crate::state::PathPrefix;

/// The dashboard's sections (their routes), in the order of the navigation.
pub(crate) const SECTIONS: &[(&str, &str)] = &[
    ("/", "Memories"),
    ("/review", "Review"),
    ("/rules", "Rules"),
    ("/access", "Access"),
    ("/connect", "Connect"),
    ("/teams", "Teams"),
    ("/insight", "Insight"),
    ("/account", "Account"),
];

/// A whole page. `current` marks the section in the navigation; `csrf`
/// (the session's token) adds the sign-out button. Every URL of the shell
/// is under the public URL's path `prefix`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "callers build the body for this page and hand it over"
)]
pub(crate) fn page(
    prefix: &PathPrefix,
    title: &str,
    session: Option<&WebSession>,
    chrome: Option<(&str, &str)>,
    main: Markup,
) -> String {
    let (current, csrf) = chrome.unzip();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — zero-memory" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href=(prefix.join(&super::CSS.href()));
                script src=(prefix.join(&super::JS.href())) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href=(prefix.join("/")) { "zero-memory" }
                    @if let Some(s) = session {
                        nav.main aria-label="Sections" {
                            ul {
                                @for (route, label) in SECTIONS {
                                    li {
                                        @if Some(*route) == current {
                                            a href=(prefix.join(route)) aria-current="page" { (label) }
                                        } @else {
                                            a href=(prefix.join(route)) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                        div.who {
                            span { (s.email) }
                            @if let Some(token) = csrf {
                                form #logout method="post" action=(prefix.join("/logout")) {
                                    input type="hidden" name="csrf" value=(token);
                                    button.secondary type="submit" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                main #main tabindex="-1" { (main) }
                footer.bottom {
                    "zero-memory " (env!("CARGO_PKG_VERSION")) " · contract " (zm_contracts::CONTRACT_VERSION)
                }
            }
        }
    }
    .into_string()
}
