//! The teams administration API: thin handlers over the store's team
//! methods. Each route is declared once in `zm_contracts::ADMIN_ROUTES`
//! (method, path, schemas, the access a token needs); [`routes`] mounts
//! exactly those, and the OpenAPI document lists exactly those.

use axum::body::Body;
use axum::extract::{Path, RawPathParams, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post};
use axum::{Extension, Router};
use serde::Serialize;
use zm_contracts::teams::{
    AddMemberInput, CreateTeamInput, InviteInput, SetRoleInput, ShareProjectInput,
};
use zm_contracts::{ADMIN_ROUTES, InvitationId, RouteAccess, ToolError, UserId};
use zm_store::{Caller, RequestId};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::routes::{caller_of, json_body};
use crate::state::AppState;

/// The caller of an admin route, its token checked against the access the
/// route declares: a read-only token's change is `forbidden`.
fn admin_caller(
    operation_id: &str,
    auth: &zm_store::Authenticated,
    headers: &HeaderMap,
    request_id: &RequestId,
) -> Result<Caller, ApiError> {
    let route = ADMIN_ROUTES
        .iter()
        .find(|r| r.operation_id == operation_id)
        .ok_or_else(|| ApiError::new(ToolError::internal()))?;
    let caller = caller_of(auth, headers, request_id);
    // An MCP app's sign-in consents to reading and writing memories, not
    // to running teams: changing one takes a personal access token (or the
    // dashboard), so a client a user was tricked into authorizing cannot
    // remove members or delete a team.
    if route.access == RouteAccess::Write && auth.kind == zm_store::TokenKind::OauthAccess {
        return Err(ApiError::new(ToolError::forbidden(
            "Changing a team takes a personal access token (zero-memory token create) or the dashboard, not an MCP app's OAuth sign-in.",
        )));
    }
    if route.access == RouteAccess::Write && !caller.grant.can_write() {
        return Err(ApiError::insufficient_scope(
            ToolError::forbidden(
                "This token is read-only: changing a team needs the mcp:write scope.",
            ),
            &[zm_store::SCOPE_READ, zm_store::SCOPE_WRITE],
        ));
    }
    Ok(caller)
}

/// A success with the status the route declares.
fn reply<T: Serialize>(operation_id: &str, body: &T) -> Response {
    let status = ADMIN_ROUTES
        .iter()
        .find(|r| r.operation_id == operation_id)
        .and_then(|r| StatusCode::from_u16(r.status).ok())
        .unwrap_or(StatusCode::OK);
    (status, axum::Json(body)).into_response()
}

fn path_error(field: &str, reason: String) -> ApiError {
    ApiError::new(zm_contracts::validate::field_error(field, reason))
}

fn user_id(raw: &str) -> Result<UserId, ApiError> {
    UserId::parse(raw).map_err(|e| path_error("user_id", e.to_string()))
}

/// The path parameters of a route, as strings (none: an empty tuple).
struct Params<T>(T);

impl<T> axum::extract::FromRequestParts<AppState> for Params<T>
where
    T: serde::de::DeserializeOwned + Send + Default,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if std::mem::size_of::<T>() == 0 {
            return Ok(Params(T::default()));
        }
        // Each value against the pattern the OpenAPI document advertises
        // for it, before any lookup: a slug that cannot name a team is
        // `validation_failed`, not an unknown team.
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::malformed(e.body_text()))?;
        for (name, value) in &raw {
            zm_contracts::teams::check_admin_path_param(name, value)?;
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Params(t))
            .map_err(|e| ApiError::malformed(e.body_text()))
    }
}

// Authentication before the path: an anonymous request is a 401 whatever
// its path holds.
macro_rules! handler {
    // A route without a body.
    ($name:ident, $op:literal, ($($p:ident),*), |$state:ident, $caller:ident| $call:expr) => {
        async fn $name(
            State($state): State<AppState>,
            Auth(auth): Auth,
            Params(($($p,)*)): Params<handler!(@types $($p),*)>,
            Extension(request_id): Extension<RequestId>,
            headers: HeaderMap,
        ) -> Result<Response, ApiError> {
            let $caller = admin_caller($op, &auth, &headers, &request_id)?;
            let out = $call.await?;
            Ok(reply($op, &out))
        }
    };
    // A route with a JSON body of type $t, bound as $input.
    ($name:ident, $op:literal, ($($p:ident),*), $input:ident: $t:ty, |$state:ident, $caller:ident| $call:expr) => {
        async fn $name(
            State($state): State<AppState>,
            Auth(auth): Auth,
            Params(($($p,)*)): Params<handler!(@types $($p),*)>,
            Extension(request_id): Extension<RequestId>,
            headers: HeaderMap,
            body: Body,
        ) -> Result<Response, ApiError> {
            let $caller = admin_caller($op, &auth, &headers, &request_id)?;
            let raw = json_body(&$state, &headers, body).await?;
            let $input: $t = zm_contracts::parse_input::<$t>(&raw)?;
            let out = $call.await?;
            Ok(reply($op, &out))
        }
    };
    (@types $($p:ident),*) => { ($(handler!(@string $p),)*) };
    (@string $p:ident) => { String };
}

handler!(create_team, "create_team", (), body: CreateTeamInput, |state, caller| {
    state.store.create_team(&caller, body)
});
handler!(list_teams, "list_teams", (), |state, caller| {
    state.store.list_teams(&caller)
});
handler!(get_team, "get_team", (team), |state, caller| {
    state.store.get_team(&caller, &team)
});
handler!(delete_team, "delete_team", (team), |state, caller| {
    state.store.delete_team(&caller, &team)
});
handler!(add_member, "add_team_member", (team), body: AddMemberInput, |state, caller| {
    state.store.add_team_member(&caller, &team, body)
});
handler!(set_role, "set_team_role", (team, member), body: SetRoleInput, |state, caller| {
    async {
        let member = user_id(&member)?;
        Ok::<_, ApiError>(state.store.set_team_role(&caller, &team, member.as_str(), body).await?)
    }
});
handler!(
    remove_member,
    "remove_team_member",
    (team, member),
    |state, caller| {
        async {
            let member = user_id(&member)?;
            Ok::<_, ApiError>(
                state
                    .store
                    .remove_team_member(&caller, &team, member.as_str())
                    .await?,
            )
        }
    }
);
handler!(invite, "invite_team_member", (team), body: InviteInput, |state, caller| {
    state.store.invite_team_member(&caller, &team, body)
});
handler!(
    withdraw_invitation,
    "withdraw_invitation",
    (team, id),
    |state, caller| {
        async {
            let id = InvitationId::parse(&id).map_err(|e| path_error("id", e.to_string()))?;
            Ok::<_, ApiError>(state.store.withdraw_invitation(&caller, &team, &id).await?)
        }
    }
);
handler!(list_invitations, "list_invitations", (), |state, caller| {
    state.store.list_invitations(&caller)
});
handler!(
    accept_invitation,
    "accept_invitation",
    (id),
    |state, caller| {
        async {
            let id = InvitationId::parse(&id).map_err(|e| path_error("id", e.to_string()))?;
            Ok::<_, ApiError>(state.store.accept_invitation(&caller, &id).await?)
        }
    }
);
handler!(share_project, "share_project_with_team", (team), body: ShareProjectInput, |state, caller| {
    state.store.share_project_with_team(&caller, &team, body)
});
handler!(
    unshare_project,
    "unshare_project_from_team",
    (team, scope),
    |state, caller| {
        state
            .store
            .unshare_project_from_team(&caller, &team, &scope)
    }
);
handler!(team_audit, "team_audit", (team), |state, caller| {
    state.store.team_audit(&caller, &team)
});
/// `GET /api/teams/{team}/export`: the route's `TeamExport`, streamed a
/// page at a time (a team of many memories is never held whole in
/// memory). A refusal, or a failure on the first page, is the usual error
/// answer; a failure on a later page cuts the connection, so the client
/// sees the export fail rather than a JSON document that stops short.
async fn export_team(
    State(state): State<AppState>,
    Auth(auth): Auth,
    Params((team,)): Params<(String,)>,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    use zm_store::teams::TEAM_EXPORT_PAGE;
    let caller = admin_caller("export_team", &auth, &headers, &request_id)?;
    let first = state
        .store
        .export_team_page(&caller, &team, None, TEAM_EXPORT_PAGE)
        .await?;
    let slug =
        serde_json::to_string(&first.team).map_err(|_| ApiError::new(ToolError::internal()))?;
    let head = format!("{{\"team\":{slug},\"items\":[");
    let body = team_export_pages(
        state,
        caller,
        team,
        auth.token_id.clone(),
        (first, head),
        TEAM_EXPORT_PAGE,
    );
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// The team export's body from its first page on (`head` opens the
/// document), in pages of `limit` memories: a page's items go out before the next page is read, and the
/// next is read only while the token `token_id` is in force (revoked,
/// expired or its account disabled meanwhile, the download ends there, as
/// every other request would be refused) and the caller still administers
/// the team (`export_team_page` asks again). A failure cuts the stream.
fn team_export_pages(
    state: AppState,
    caller: Caller,
    team: String,
    token_id: String,
    (first, head): (zm_store::teams::TeamExportPage, String),
    limit: u32,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    let start = ExportStep::Page {
        page: first,
        out: head,
        wrote_any: false,
    };
    futures::stream::unfold(start, move |step| {
        let (state, caller, team, token_id) = (
            state.clone(),
            caller.clone(),
            team.clone(),
            token_id.clone(),
        );
        async move {
            let step = match step {
                ExportStep::After { after, wrote_any } => {
                    let page = match state.store.token_in_force(&token_id).await {
                        Ok(true) => {
                            state
                                .store
                                .export_team_page(&caller, &team, Some(after), limit)
                                .await
                        }
                        Ok(false) => {
                            Err(ToolError::unauthorized("the token is no longer in force"))
                        }
                        Err(e) => Err(e),
                    };
                    match page {
                        Ok(page) => ExportStep::Page {
                            page,
                            out: String::new(),
                            wrote_any,
                        },
                        Err(e) => {
                            tracing::warn!(target: "zm_http", code = e.code.as_str(), "a team export stopped short");
                            ExportStep::Failed
                        }
                    }
                }
                step => step,
            };
            let (page, mut out, mut wrote_any) = match step {
                ExportStep::Done | ExportStep::After { .. } => return None,
                ExportStep::Failed => {
                    let cut = std::io::Error::other("the team export stopped short");
                    return Some((Err(cut), ExportStep::Done));
                }
                ExportStep::Page {
                    page,
                    out,
                    wrote_any,
                } => (page, out, wrote_any),
            };
            for m in &page.items {
                let Ok(text) = serde_json::to_string(m) else {
                    return Some((Ok(bytes::Bytes::from(out)), ExportStep::Failed));
                };
                if wrote_any {
                    out.push(',');
                }
                out.push_str(&text);
                wrote_any = true;
            }
            let next = match page.next {
                None => {
                    out.push_str("]}");
                    ExportStep::Done
                }
                Some(after) => ExportStep::After { after, wrote_any },
            };
            Some((Ok::<_, std::io::Error>(bytes::Bytes::from(out)), next))
        }
    })
}

/// Where a streamed team export stands: a page to write (after what is
/// already in `out`), the point after which the next page is still to
/// read, a failure to cut the connection with, or done.
enum ExportStep {
    Page {
        page: zm_store::teams::TeamExportPage,
        out: String,
        wrote_any: bool,
    },
    After {
        after: zm_store::teams::TeamExportPosition,
        wrote_any: bool,
    },
    Failed,
    Done,
}

/// The handler of each declared route, with the method it answers.
fn handler_of(operation_id: &str) -> Option<(&'static str, MethodRouter<AppState>)> {
    Some(match operation_id {
        "create_team" => ("POST", post(create_team)),
        "list_teams" => ("GET", get(list_teams)),
        "get_team" => ("GET", get(get_team)),
        "delete_team" => ("DELETE", delete(delete_team)),
        "add_team_member" => ("POST", post(add_member)),
        "set_team_role" => ("PATCH", patch(set_role)),
        "remove_team_member" => ("DELETE", delete(remove_member)),
        "invite_team_member" => ("POST", post(invite)),
        "withdraw_invitation" => ("DELETE", delete(withdraw_invitation)),
        "list_invitations" => ("GET", get(list_invitations)),
        "accept_invitation" => ("POST", post(accept_invitation)),
        "share_project_with_team" => ("POST", post(share_project)),
        "unshare_project_from_team" => ("DELETE", delete(unshare_project)),
        "team_audit" => ("GET", get(team_audit)),
        "export_team" => ("GET", get(export_team)),
        _ => return None,
    })
}

/// Every route of `ADMIN_ROUTES`, mounted. Panics at start-up (and in
/// the tests) when a declared route has no handler or its handler answers
/// another method than the declaration.
pub fn routes() -> Router<AppState> {
    let mut by_path: Vec<(&str, MethodRouter<AppState>)> = Vec::new();
    for r in ADMIN_ROUTES {
        let (method, handler) = handler_of(r.operation_id)
            .unwrap_or_else(|| panic!("admin route {} has no handler", r.operation_id));
        assert_eq!(method, r.method, "admin route {}", r.operation_id);
        match by_path.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, m)) => *m = std::mem::take(m).merge(handler),
            None => by_path.push((r.path, handler)),
        }
    }
    let mut router = Router::new();
    for (path, methods) in by_path {
        router = router.route(path, methods);
    }
    router
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    /// A team export's next page is read only while its token is in
    /// force: revoked between two pages, the stream ends with an error (it
    /// ran on to the end); a token in force gets the whole document.
    #[tokio::test]
    async fn a_team_export_stops_at_the_page_after_its_token_is_revoked() {
        const PAGE: u32 = 3;
        let (_dir, store) = crate::testing::sqlite_store().await;
        let user = store
            .create_user("team-export-cut@example.com", "a long test password")
            .await
            .unwrap();
        let caller = zm_store::Caller::new(user.id.clone());
        let input: zm_contracts::teams::CreateTeamInput =
            zm_contracts::parse_input(&json!({"slug": "exporters"})).unwrap();
        store.create_team(&caller, input).await.unwrap();
        crate::testing::remember_n(&store, &caller, "team.exporters", "Team line", PAGE + 2).await;
        let state = crate::state(
            store.clone(),
            crate::HttpConfig::local("http://127.0.0.1:8787"),
        );
        let mut outcomes = Vec::new();
        for revoked in [false, true] {
            let (token, _) = store
                .create_token(&user.id, None, &["mcp:read", "mcp:write"])
                .await
                .unwrap();
            let first = store
                .export_team_page(&caller, "exporters", None, PAGE)
                .await
                .unwrap();
            let stream = super::team_export_pages(
                state.clone(),
                caller.clone(),
                "exporters".into(),
                token.id.clone(),
                (first, "{\"team\":\"exporters\",\"items\":[".into()),
                PAGE,
            );
            futures::pin_mut!(stream);
            let mut body = stream
                .next()
                .await
                .expect("the first page")
                .unwrap()
                .to_vec();
            if revoked {
                store
                    .revoke_token(&user.id, &token.id, zm_store::Transport::Rest)
                    .await
                    .unwrap();
            }
            let mut failed = false;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(b) => body.extend_from_slice(&b),
                    Err(_) => failed = true,
                }
            }
            outcomes.push((failed, body));
        }
        let (failed, body) = &outcomes[0];
        assert!(!failed, "a token in force gets the whole export");
        let doc: serde_json::Value = serde_json::from_slice(body).expect("one JSON document");
        assert_eq!(
            doc["items"].as_array().map(Vec::len),
            Some(PAGE as usize + 2)
        );
        assert!(outcomes[1].0, "a revoked token's export is cut");
    }
}
