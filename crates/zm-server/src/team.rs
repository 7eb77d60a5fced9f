//! `zero-memory team …`: the teams administration of the REST API, from
//! the command line, acting as one user (`--as EMAIL`, default the owner)
//! through the same store methods — so the same roles and audit rows.

use anyhow::anyhow;
use zm_contracts::teams::{AddMemberInput, CreateTeamInput, SetRoleInput, TeamDetail};
use zm_store::{Caller, Store, Transport};

use crate::cli::TeamCommand;
use crate::commands::{find_user, open_store, print_table, say, tool};
use crate::config::Config;

/// The acting user's caller: `--as EMAIL`, else the owner.
async fn actor(store: &Store, email: Option<&str>) -> anyhow::Result<Caller> {
    let user = match email {
        Some(e) => find_user(store, e).await?,
        None => store
            .owner()
            .await
            .map_err(tool)?
            .ok_or_else(|| {
                anyhow!(
                    "this database has no owner (none yet, or the owner's account was erased); pass --as EMAIL, or appoint one with `zero-memory user owner EMAIL`"
                )
            })?,
    };
    if user.is_disabled() {
        return Err(match email {
            Some(_) => anyhow!("the account {} is disabled", user.email),
            None => anyhow!(
                "the owner's account {} is disabled; pass --as EMAIL, enable it (`zero-memory user enable`), or appoint another owner (`zero-memory user owner EMAIL`)",
                user.email
            ),
        });
    }
    let mut caller = Caller::new(user.id);
    caller.transport = Transport::Cli;
    Ok(caller)
}

/// A team named on the command line, checked as the REST routes check
/// their `{team}`: `validation_failed` before any lookup.
fn team_slug(slug: &str) -> anyhow::Result<&str> {
    zm_contracts::teams::check_admin_path_param("team", slug).map_err(tool)?;
    Ok(slug)
}

/// A team's deletion asked for once more: at a terminal, by typing its
/// slug; anywhere else (a script, a pipe) it takes `--yes`.
fn confirm_deletion(slug: &str) -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(anyhow!(
            "not deleted: deleting team {slug} makes its memories readable by nobody (its admins can export them for 30 days); pass --yes to delete it without a prompt"
        ));
    }
    eprint!(
        "Deleting team {slug} makes its memories readable by nobody; its admins can export them for 30 days, then they are erased.\nType the team's slug to delete it: "
    );
    std::io::stderr().flush().ok();
    let mut typed = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut typed)
        .map_err(|e| anyhow!("cannot read the confirmation: {e}"))?;
    if typed.trim() != slug {
        return Err(anyhow!("not deleted: the slug typed was not {slug}"));
    }
    Ok(())
}

fn print_detail(d: &TeamDetail) -> anyhow::Result<()> {
    say(format!(
        "team {} ({}) — scope {} — your role: {} — created {}",
        d.team.slug, d.team.name, d.team.scope, d.team.role, d.team.created_at
    ))?;
    let rows: Vec<Vec<String>> = d
        .members
        .iter()
        .map(|m| {
            vec![
                m.email.clone(),
                m.role.to_string(),
                m.user_id.to_string(),
                m.added_at.clone(),
            ]
        })
        .collect();
    print_table(&["MEMBER", "ROLE", "USER ID", "SINCE"], &rows)?;
    if !d.projects.is_empty() {
        let rows: Vec<Vec<String>> = d
            .projects
            .iter()
            .map(|p| {
                vec![
                    p.scope.clone(),
                    if p.owned { "team" } else { "shared" }.to_string(),
                    p.added_at.clone(),
                ]
            })
            .collect();
        print_table(&["PROJECT", "KIND", "SINCE"], &rows)?;
    }
    if !d.invitations.is_empty() {
        let rows: Vec<Vec<String>> = d
            .invitations
            .iter()
            .map(|i| {
                vec![
                    i.id.to_string(),
                    i.email.clone(),
                    i.role.to_string(),
                    i.status.to_string(),
                    i.expires_at.clone(),
                ]
            })
            .collect();
        print_table(&["INVITATION", "EMAIL", "ROLE", "STATUS", "EXPIRES"], &rows)?;
    }
    Ok(())
}

pub async fn run(cfg: &Config, command: TeamCommand) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let result = run_on(&store, command).await;
    store.close().await;
    result
}

async fn run_on(store: &Store, command: TeamCommand) -> anyhow::Result<()> {
    match command {
        TeamCommand::Create {
            slug,
            name,
            actor: a,
        } => {
            let caller = actor(store, a.as_deref()).await?;
            let input: CreateTeamInput = zm_contracts::parse_input(&serde_json::json!({
                "slug": slug,
                "name": name,
            }))
            .map_err(tool)?;
            let d = store.create_team(&caller, input).await.map_err(tool)?;
            print_detail(&d)?;
        }
        TeamCommand::List { actor: a } => {
            let caller = actor(store, a.as_deref()).await?;
            let list = store.list_teams(&caller).await.map_err(tool)?;
            let rows: Vec<Vec<String>> = list
                .teams
                .iter()
                .map(|t| {
                    vec![
                        t.slug.clone(),
                        t.name.clone(),
                        t.role.to_string(),
                        t.members.to_string(),
                        t.created_at.clone(),
                    ]
                })
                .collect();
            print_table(&["TEAM", "NAME", "YOUR ROLE", "MEMBERS", "CREATED"], &rows)?;
        }
        TeamCommand::Show { slug, actor: a } => {
            let caller = actor(store, a.as_deref()).await?;
            let d = store
                .get_team(&caller, team_slug(&slug)?)
                .await
                .map_err(tool)?;
            print_detail(&d)?;
        }
        TeamCommand::Delete {
            slug,
            actor: a,
            yes,
        } => {
            let caller = actor(store, a.as_deref()).await?;
            team_slug(&slug)?;
            // Asked only of whom the deletion would go ahead for: a team
            // that does not exist, or a member who is not its admin, gets
            // the store's answer at once.
            if !yes
                && store
                    .get_team(&caller, &slug)
                    .await
                    .map_err(tool)?
                    .team
                    .role
                    == zm_contracts::TeamRole::Admin
            {
                confirm_deletion(&slug)?;
            }
            let done = store.delete_team(&caller, &slug).await.map_err(tool)?;
            eprintln!(
                "deleted team {}: {} memories are readable by nobody; its admins can export them (GET /api/teams/{}/export) until {}, when they are erased",
                done.slug, done.memories, done.slug, done.purge_after
            );
        }
        TeamCommand::Add {
            email,
            team,
            role,
            actor: a,
        } => {
            let caller = actor(store, a.as_deref()).await?;
            // Checked as the REST route checks its body: the same address
            // rules, `validation_failed` before any lookup.
            let role: zm_contracts::TeamRole = role.into();
            let input: AddMemberInput = zm_contracts::parse_input(&serde_json::json!({
                "email": email,
                "role": role.as_str(),
            }))
            .map_err(tool)?;
            let m = store
                .add_team_member(&caller, team_slug(&team)?, input)
                .await
                .map_err(tool)?;
            eprintln!("{} is now {} of team {team}", m.email, m.role);
        }
        TeamCommand::Remove {
            email,
            team,
            actor: a,
        } => {
            let caller = actor(store, a.as_deref()).await?;
            team_slug(&team)?;
            let user = find_user(store, &email).await?;
            store
                .remove_team_member(&caller, &team, &user.id)
                .await
                .map_err(tool)?;
            eprintln!("{email} is no longer a member of team {team}");
        }
        TeamCommand::Role {
            email,
            team,
            role,
            actor: a,
        } => {
            let caller = actor(store, a.as_deref()).await?;
            team_slug(&team)?;
            let user = find_user(store, &email).await?;
            let m = store
                .set_team_role(&caller, &team, &user.id, SetRoleInput { role: role.into() })
                .await
                .map_err(tool)?;
            eprintln!("{} is now {} of team {team}", m.email, m.role);
        }
    }
    Ok(())
}
