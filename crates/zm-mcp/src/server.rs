//! The MCP server handler: one instance per connection (stdio) or per
//! session / stateless request (Streamable HTTP).

use std::sync::{Arc, Mutex};

#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, DiscoverResult, GetPromptRequestParams,
    GetPromptResponse, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use zm_contracts::catalogue::{CATALOGUE, PROMPTS, RESOURCES};
use zm_contracts::uri::{ResourceUri, UriError};
use zm_contracts::{CONTRACT_VERSION, ErrorCode, IdKind, ToolError, ToolName, ToolOutput};
use zm_store::{Authenticated, Caller, RequestId, SharedSession, ToolService, Transport};

use crate::envelope::{self, FooterContext};
use crate::instructions;

/// Server-wide MCP settings.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// Client names (`clientInfo.name`, case-insensitive) whose instructions
    /// channel is capped at 2,000 characters.
    pub capped_clients: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            capped_clients: vec!["claude-code".into()],
        }
    }
}

/// Who the connection acts for.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A fixed local account (stdio).
    User(String),
    /// The bearer token the HTTP layer verified, found in the request's
    /// extensions as a [`zm_store::Authenticated`].
    Http,
}

/// What a connection carries between calls: its transport session, the
/// project it is attached to and the thread it was last given — all
/// decided by the tool service and kept here as it reports them. (An
/// MCP-over-HTTP session keeps them in the database instead, so that any
/// instance can serve its next request: the HTTP layer hands each request
/// the session's [`SharedSession`].)
#[derive(Debug, Default)]
struct ConnState {
    session_id: Option<String>,
    attached_project: Option<String>,
    thread: Option<String>,
}

/// The zero-memory MCP server.
#[derive(Clone)]
pub struct ZeroMemoryMcp {
    tools: ToolService,
    config: Arc<McpConfig>,
    identity: Identity,
    conn: Arc<Mutex<ConnState>>,
}

fn to<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("well-formed MCP model value")
}

impl ZeroMemoryMcp {
    /// A handler for one connection.
    pub fn new(tools: ToolService, config: Arc<McpConfig>, identity: Identity) -> Self {
        ZeroMemoryMcp {
            tools,
            config,
            identity,
            conn: Arc::new(Mutex::new(ConnState {
                session_id: Some(IdKind::McpSession.generate()),
                attached_project: None,
                thread: None,
            })),
        }
    }

    /// Attach the connection to a project (stdio: from the working directory).
    pub fn with_attached_project(self, project: Option<String>) -> Self {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .attached_project = project;
        self
    }

    /// The project this connection is attached to.
    pub fn attached_project(&self) -> Option<String> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .attached_project
            .clone()
    }

    /// The thread this connection carries (a briefing's, for the project
    /// it is attached to).
    pub fn thread(&self) -> Option<String> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .thread
            .clone()
    }

    /// The caller of a request: the local account (stdio) or the token the
    /// HTTP layer verified, with the connection's carried state.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        let mut caller = match &self.identity {
            Identity::User(uid) => Caller {
                transport: Transport::Mcp,
                ..Caller::new(uid.clone())
            },
            Identity::Http => {
                let auth = ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.extensions.get::<Authenticated>())
                    .ok_or_else(|| McpError::invalid_request("unauthenticated request", None))?;
                Caller::authenticated(auth, Transport::Mcp)
            }
        };
        caller.agent_name = zm_store::agent_name(ctx.client_info().map(|i| i.name).as_deref());
        if let Some(shared) = Self::shared_session(ctx) {
            caller.session_id = Some(shared.conn_id.clone());
            caller.attached_project = shared.attached_project.clone();
            caller.thread = shared.thread.clone();
        } else {
            let state = self
                .conn
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A stdio connection is one session in either era (it keeps
            // its attachment and thread too); an HTTP request without a
            // shared session is stateless and has none.
            caller.session_id = match self.identity {
                Identity::User(_) => state.session_id.clone(),
                Identity::Http => None,
            };
            caller.attached_project = state.attached_project.clone();
            caller.thread = state.thread.clone();
        }
        // Over HTTP, the id the request-id middleware adopted or minted.
        caller.request_id = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<RequestId>())
            .map(|r| r.0.clone());
        Ok(caller)
    }

    /// The shared session of an MCP-over-HTTP request, as the HTTP layer
    /// resumed it (owner checked) and put in the request's extensions.
    fn shared_session(ctx: &RequestContext<RoleServer>) -> Option<&SharedSession> {
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<SharedSession>())
    }

    /// Keep what the tool service reported about the session: the
    /// attachment it decided (first attach wins) and a thread it issued —
    /// in the database for a shared (HTTP) session, else in the connection
    /// — and make the output report what is kept. Two calls in flight on
    /// an unattached session may each attach it to another project: the
    /// first one kept wins, and the other's output says so. A stateless
    /// HTTP request keeps nothing: its output reports no attachment the
    /// next request would not have.
    async fn carry(
        &self,
        out: &mut ToolOutput,
        ctx: &RequestContext<RoleServer>,
        before: Option<&str>,
    ) {
        let attached = out.session().and_then(|s| s.attached_project.clone());
        // A briefing's thread is kept by a connection only when it is for
        // the project the connection is attached to (or it is attached to
        // none): a briefing pinned elsewhere serves that read, and its
        // thread is the caller's to pass explicitly. Kept, it would route
        // every later scope-less write and read there, while the footer
        // still says they land in the attached project.
        let pin = match &*out {
            ToolOutput::BuildContext(o) => o.project_scope.clone(),
            _ => None,
        };
        let keeps_thread =
            |attachment: Option<&str>| attachment.is_none() || attachment == pin.as_deref();
        if let Some(shared) = Self::shared_session(ctx) {
            // Only what changed: most calls report the attachment they had.
            // A read reports another one when it attached an unattached
            // session, or when the session's project is one the caller no
            // longer reaches (left, unshared): it is replaced over the one
            // held (compare-and-set).
            let held = shared.attached_project.as_deref();
            let project = (out.session().is_some() && attached.as_deref() != held)
                .then_some((held, attached.as_deref()));
            // The store keeps it only if the attachment the row holds once
            // `project` is settled agrees (`keeps_thread` in SQL): the one
            // this call reports may lose to a parallel call's.
            let thread = out
                .issued_thread()
                .filter(|t| Some(*t) != shared.thread.as_deref())
                .filter(|_| keeps_thread(attached.as_deref().or(held)))
                .map(str::to_string);
            if project.is_some() || thread.is_some() {
                // A failure is logged by the store; the call itself succeeded.
                let kept = self
                    .tools
                    .store()
                    .mcp_session_carry(
                        &shared.id,
                        project,
                        thread.as_deref().map(|t| (t, pin.as_deref())),
                    )
                    .await;
                if let (Ok(kept), Some(session), true) =
                    (kept, out.session_mut(), project.is_some())
                {
                    session.attached_project = kept;
                }
            }
            return;
        }
        if matches!(self.identity, Identity::Http) {
            // No session: this handler lives for this request only.
            if let Some(session) = out.session_mut() {
                session.attached_project = before.map(str::to_string);
            }
            return;
        }
        let mut st = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (&st.attached_project, out.session_mut()) {
            (None, Some(_)) => st.attached_project = attached,
            // The project held when the call began, which the caller no
            // longer reaches: the read let go of it.
            (Some(kept), Some(_))
                if Some(kept.as_str()) == before && attached.as_deref() != before =>
            {
                st.attached_project = attached;
            }
            (Some(kept), Some(session)) => session.attached_project = Some(kept.clone()),
            (_, None) => {}
        }
        if let Some(thread) = out.issued_thread()
            && keeps_thread(st.attached_project.as_deref())
        {
            st.thread = Some(thread.to_string());
        }
    }

    fn base_config(&self, instructions: Option<String>) -> ServerConfig {
        let mut cfg: ServerConfig = to(json!({
            "protocolVersion": ProtocolVersion::LATEST_WITH_INITIALIZE,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"listChanged": false, "subscribe": false},
                "prompts": {"listChanged": false},
                "logging": {},
                "experimental": {"zero-memory/contract": {"version": CONTRACT_VERSION}},
            },
            "serverInfo": {"name": "zero-memory", "title": "Zero Memory", "version": env!("CARGO_PKG_VERSION")},
        }));
        cfg.instructions = instructions;
        cfg
    }

    /// The instructions for `client`; `stateless` puts the stateless note
    /// first, within a capped client's budget.
    async fn instructions_for(
        &self,
        client: Option<&str>,
        caller: Option<&Caller>,
        stateless: bool,
    ) -> String {
        // A stdio account disabled or erased since the process started
        // gets no rules (memory-derived text) at a new `initialize` or
        // `server/discover`, as its tool calls and resource reads get none.
        let live = self.account_live().await.is_ok();
        let rules = match caller.filter(|_| live) {
            Some(c) => match self.tools.store().user_rules(c).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "rules lookup for instructions failed");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let capped = instructions::is_capped(client, &self.config.capped_clients);
        // A local server (stdio) attached the session at its start (or
        // was told not to); an HTTP one cannot see the client's workspace.
        let local = matches!(self.identity, Identity::User(_));
        let note = instructions::attachment_note(local, self.attached_project().as_deref());
        let short = instructions::capped_attachment_note(local, self.attached_project().as_deref());
        let composed =
            instructions::compose_for(&rules, capped, stateless, &note, short.as_deref());
        if !composed.dropped.is_empty() {
            tracing::warn!(client = client.unwrap_or("?"), dropped = ?composed.dropped, "instructions trimmed to the client's budget");
        }
        composed.text
    }

    /// Does the client's protocol revision have `resource_link` content
    /// blocks (2025-06-18 and later)? An older client's SDK refuses a
    /// content block of a type it does not know, and with it the result.
    fn knows_resource_links(ctx: &RequestContext<RoleServer>) -> bool {
        ctx.protocol_version()
            .is_none_or(|v| v >= rmcp::model::ProtocolVersion::V_2025_06_18)
    }

    fn codex(ctx: &RequestContext<RoleServer>) -> bool {
        ctx.client_info()
            .is_some_and(|i| i.name.to_lowercase().contains("codex"))
    }

    /// The local account a stdio connection serves, read again on every
    /// request: one disabled or erased meanwhile is refused at once, as an
    /// HTTP request's token is at its authentication.
    async fn account_live(&self) -> Result<(), ToolError> {
        let Identity::User(uid) = &self.identity else {
            return Ok(());
        };
        match self.tools.store().user_by_id(uid).await? {
            Some(u) if !u.is_disabled() => Ok(()),
            Some(_) => Err(ToolError::unauthorized(
                "This account is disabled; `zero-memory user enable` lets it in again.",
            )),
            None => Err(ToolError::unauthorized("This account no longer exists.")),
        }
    }

    /// Run one tool call and build its MCP result.
    async fn run_tool(
        &self,
        name: &str,
        args: Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResult, McpError> {
        let Some(tool) = ToolName::parse(name) else {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {name}"),
                None,
            ));
        };
        let caller = self.caller(ctx)?;
        if let Err(e) = self.account_live().await {
            return Ok(envelope::failure(&e));
        }
        // Arguments that held a key twice (marked before rmcp parsed them,
        // keeping the last value): refused as REST refuses such a body.
        if let Some(path) = ctx
            .meta
            .get(crate::repeated::REPEATED_KEY_META)
            .and_then(Value::as_str)
        {
            return Ok(envelope::failure(&zm_contracts::validate::field_error(
                path,
                zm_contracts::validate::REPEATED_KEY_REASON,
            )));
        }
        let footer_ctx = FooterContext {
            attached_before: caller.attached_project.clone(),
            stateless: matches!(self.identity, Identity::Http)
                && Self::shared_session(ctx).is_none(),
        };
        // A read stops when the client cancels it (`notifications/cancelled`,
        // or its session ends); a write runs to its end. rmcp sends no
        // answer to a cancelled request, so what a stopped read returns
        // here is never seen.
        let Some(result) = self
            .tools
            .call_unless_cancelled(&caller, tool, &args, ctx.ct.cancelled())
            .await
        else {
            return Err(McpError::internal_error("The request was cancelled.", None));
        };
        match result {
            Ok(mut out) => {
                self.carry(&mut out, ctx, caller.attached_project.as_deref())
                    .await;
                Ok(envelope::success(
                    &out,
                    &footer_ctx,
                    Self::codex(ctx),
                    Self::knows_resource_links(ctx),
                ))
            }
            Err(e) => Ok(envelope::failure(&e)),
        }
    }

    fn resource_error(
        ctx: &RequestContext<RoleServer>,
        message: String,
        not_found: bool,
    ) -> McpError {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v.as_str() >= "2026-07-28");
        if not_found && !modern {
            McpError::resource_not_found(message, None)
        } else {
            McpError::invalid_params(message, None)
        }
    }
}

/// A resource read the store refused, as a JSON-RPC error: ours
/// (`internal`) is -32603 with no detail; one the caller can act on (a
/// disabled account, a busy server) is an implementation-defined -32000
/// whose `data` is the contract's error body, so its code
/// (`unauthorized`, `rate_limited`, …) reads as a tool call's would.
fn resource_failure(e: &ToolError) -> McpError {
    if e.code == ErrorCode::Internal {
        return McpError::internal_error("Internal server error.", None);
    }
    McpError::new(
        rmcp::model::ErrorCode(IMPLEMENTATION_ERROR),
        e.message.clone(),
        Some(e.to_json()),
    )
}

/// The JSON-RPC code of a refusal the protocol has no code for (MCP
/// 2026-07-28: -32000..-32019 are the implementation's).
const IMPLEMENTATION_ERROR: i32 = -32000;

/// Every list is answered whole on its first page, so no cursor was ever
/// issued: one sent is not ours (MCP Utilities/Pagination: an invalid
/// cursor is -32602).
fn no_cursor(request: Option<&PaginatedRequestParams>) -> Result<(), McpError> {
    match request.and_then(|r| r.cursor.as_ref()) {
        Some(_) => Err(McpError::invalid_params(
            "Unknown cursor: this server answers every list on one page and issues no cursors.",
            None,
        )),
        None => Ok(()),
    }
}

/// Every tool of the catalogue, as MCP `Tool`s, in catalogue order.
pub fn tools() -> Vec<rmcp::model::Tool> {
    TOOLS.clone()
}

/// The tool list, built once: its 36 schemas come from the catalogue,
/// which no request changes, and `tools/list` opens every session.
static TOOLS: std::sync::LazyLock<Vec<rmcp::model::Tool>> = std::sync::LazyLock::new(|| {
    CATALOGUE
        .iter()
        .map(|t| {
            to(json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "inputSchema": (t.input_schema)(),
                "outputSchema": (t.output_schema)(),
                "annotations": {
                    "title": t.title,
                    "readOnlyHint": t.annotations.read_only_hint,
                    "destructiveHint": t.annotations.destructive_hint,
                    "idempotentHint": t.annotations.idempotent_hint,
                    "openWorldHint": t.annotations.open_world_hint,
                },
            }))
        })
        .collect()
});

/// The requests this server serves, by MCP's names: one of them that
/// reaches [`ServerHandler::on_custom_request`] had parameters rmcp could
/// not read as MCP gives them. (Those it does not serve, subscriptions and
/// completions among them, stay "Method not found" however they are
/// written.)
fn is_mcp_request(method: &str) -> bool {
    use rmcp::model::{
        CallToolRequestMethod, ConstString, DiscoverRequestMethod, GetPromptRequestMethod,
        InitializeResultMethod, ListPromptsRequestMethod, ListResourceTemplatesRequestMethod,
        ListResourcesRequestMethod, ListToolsRequestMethod, PingRequestMethod,
        ReadResourceRequestMethod, SetLevelRequestMethod,
    };
    [
        InitializeResultMethod::VALUE,
        PingRequestMethod::VALUE,
        DiscoverRequestMethod::VALUE,
        ListToolsRequestMethod::VALUE,
        CallToolRequestMethod::VALUE,
        ListResourcesRequestMethod::VALUE,
        ListResourceTemplatesRequestMethod::VALUE,
        ReadResourceRequestMethod::VALUE,
        ListPromptsRequestMethod::VALUE,
        GetPromptRequestMethod::VALUE,
        SetLevelRequestMethod::VALUE,
    ]
    .contains(&method)
}

/// The handlers whose panics [`or_internal_error`] answers.
impl ZeroMemoryMcp {
    /// [`ServerHandler::initialize`], which answers a panic here as an
    /// internal error.
    async fn initialize_now(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // rmcp records the client's parameters before a handshake's
        // `initialize` reaches us and the negotiated version after it; a
        // stateless request's peer has none yet. An `initialize` sent again
        // on a live session must not replace the negotiated version with
        // the one it asks for (later calls would follow another era).
        if ctx.peer.peer_info().is_none() {
            ctx.peer.set_peer_info(request.clone());
        }
        let mut info = self.negotiate_initialize(&request)?;
        let caller = self.caller(&ctx).ok();
        info.instructions = Some(
            self.instructions_for(Some(&request.client_info.name), caller.as_ref(), false)
                .await,
        );
        Ok(info)
    }

    /// [`ServerHandler::discover`], which answers a panic here as an
    /// internal error.
    async fn discover_now(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let caller = self.caller(&ctx).ok();
        let client = ctx.client_info().map(|i| i.name);
        // Stateless over HTTP: nothing attaches between calls.
        let stateless = matches!(self.identity, Identity::Http);
        let text = self
            .instructions_for(client.as_deref(), caller.as_ref(), stateless)
            .await;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.base_config(Some(text)),
        ))
    }

    /// [`ServerHandler::read_resource`], which answers a panic here as an
    /// internal error.
    async fn read_resource_now(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let caller = self.caller(&ctx)?;
        self.account_live()
            .await
            .map_err(|e| resource_failure(&e))?;
        let text = match ResourceUri::parse(&request.uri) {
            Ok(ResourceUri::Memory(id)) => {
                match self.tools.store().get_memory(&caller, &id).await {
                    Ok(m) => serde_json::to_string(&m)
                        .map_err(|e| McpError::internal_error(e.to_string(), None))?,
                    Err(e) if e.code == ErrorCode::NotFound => {
                        return Err(Self::resource_error(
                            &ctx,
                            format!("Memory {id} not found."),
                            true,
                        ));
                    }
                    Err(e) => return Err(resource_failure(&e)),
                }
            }
            Ok(ResourceUri::Rules) => {
                let rules = self
                    .tools
                    .store()
                    .rules_resource(&caller)
                    .await
                    .map_err(|e| resource_failure(&e))?;
                serde_json::to_string(&zm_contracts::RuleList { rules })
                    .map_err(|_| McpError::internal_error("Internal server error.", None))?
            }
            Err(UriError::NotAMemoryId(raw, _)) => {
                return Err(McpError::invalid_params(
                    format!("Not a memory id: {raw}"),
                    None,
                ));
            }
            Err(UriError::Unknown(uri)) => {
                return Err(Self::resource_error(
                    &ctx,
                    format!("Resource {uri} not found."),
                    true,
                ));
            }
        };
        let result: rmcp::model::ReadResourceResult = to(json!({
            // resultType as rmcp's constructors set it (required by 2026-07-28;
            // stripped for older peers).
            "resultType": "complete",
            "contents": [{"uri": request.uri, "mimeType": "application/json", "text": text}]
        }));
        Ok(result.into())
    }
}

impl ServerHandler for ZeroMemoryMcp {
    fn get_info(&self) -> ServerConfig {
        self.base_config(Some(instructions::compose(&[], false).text))
    }

    /// A request rmcp found no typed request in. A method MCP names (a
    /// `tools/call` whose `arguments` is an array, whose `name` is a
    /// number) had parameters of the wrong shape: the caller's to fix,
    /// -32602 (Invalid params), not -32601 as though this server had no
    /// `tools/call`. Any other method is not one this server has.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        let method = request.method;
        if !is_mcp_request(&method) {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                method,
                None,
            ));
        }
        let shape = if method == "tools/call" {
            " (an object: \"name\", a tool's name; \"arguments\", an object)"
        } else {
            ""
        };
        Err(McpError::invalid_params(
            format!(
                "Invalid params: the params of {method} do not have the shape MCP gives them{shape}."
            ),
            None,
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        or_internal_error("initialize", self.initialize_now(request, ctx)).await
    }

    async fn discover(&self, ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        or_internal_error("server/discover", self.discover_now(ctx)).await
    }
    /// We send no log notifications (logs go to stderr), so every level is
    /// honoured trivially; accepting it keeps 2025-era clients that set one
    /// happy. (Logging is deprecated from 2026-07-28 on.)
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tracing::debug!(level = ?request.level, "client set its log level");
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        no_cursor(request.as_ref())?;
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.map_or(Value::Null, Value::Object);
        answer_or_internal(self.run_tool(&request.name, args, &ctx))
            .await
            .map(Into::into)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        no_cursor(request.as_ref())?;
        let items = RESOURCES
            .iter()
            .filter(|r| !r.template)
            .map(|r| {
                to(json!({
                    "uri": r.uri, "name": r.name, "title": r.title, "description": r.description,
                    "mimeType": r.mime_type, "annotations": {"audience": ["assistant"], "priority": 1.0},
                }))
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        no_cursor(request.as_ref())?;
        let items = RESOURCES
            .iter()
            .filter(|r| r.template)
            .map(|r| {
                to(json!({
                    "uriTemplate": r.uri, "name": r.name, "title": r.title, "description": r.description,
                    "mimeType": r.mime_type, "annotations": {"audience": ["assistant"]},
                }))
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(items))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        or_internal_error("resources/read", self.read_resource_now(request, ctx)).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        no_cursor(request.as_ref())?;
        let items = PROMPTS
            .iter()
            .map(|p| {
                let args: Vec<Value> = p
                    .arguments
                    .iter()
                    .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
                    .collect();
                to(json!({"name": p.name, "title": p.title, "description": p.description, "arguments": args}))
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(items))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != "brief" {
            return Err(McpError::invalid_params(
                format!("Unknown prompt: {}", request.name),
                None,
            ));
        }
        let topic = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("topic"))
            .and_then(|t| t.as_str())
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .unwrap_or("the current project and its active work")
            .to_string();
        let text = format!(
            "Call build_context with topic {topic:?} and briefing: true (pass project_hint: the repository root path or its git remote URL). Then report, briefly: the standing rules (follow them), the open loops, and the memories most relevant to the work. For any memory marked truncated, read zm://memory/{{id}} for its full text. Echo session.thread as thread on later calls."
        );
        let result: rmcp::model::GetPromptResult = to(json!({
            "resultType": "complete",
            "description": "Brief on the current project before starting work.",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }));
        Ok(result.into())
    }
}
/// A tool call's answer, or, should it panic, the `internal` error as a
/// tool result (the panic logged here): the request is answered whatever
/// happens, as REST answers a panic with a 500. Unanswered, a stdio
/// client would wait for its id forever and a stateless HTTP POST would
/// hang until its client gave up. A write's transaction rolls back as
/// its connection drops, so nothing is half-written.
async fn answer_or_internal<F>(call: F) -> Result<rmcp::model::CallToolResult, McpError>
where
    F: std::future::Future<Output = Result<rmcp::model::CallToolResult, McpError>>,
{
    unless_panicked("tools/call", call)
        .await
        .unwrap_or_else(|| Ok(envelope::failure(&ToolError::internal())))
}

/// Another request's answer, or, when answering it panicked, JSON-RPC's
/// internal error (-32603) without detail, for the reason
/// [`answer_or_internal`] gives.
async fn or_internal_error<T, F>(method: &'static str, call: F) -> Result<T, McpError>
where
    F: std::future::Future<Output = Result<T, McpError>>,
{
    unless_panicked(method, call)
        .await
        .unwrap_or_else(|| Err(McpError::internal_error("Internal server error.", None)))
}

/// `call`'s output, or `None` when it panicked (the panic's words go to
/// the log only).
async fn unless_panicked<T>(
    method: &'static str,
    call: impl std::future::Future<Output = T>,
) -> Option<T> {
    use futures_util::FutureExt as _;
    match std::panic::AssertUnwindSafe(call).catch_unwind().await {
        Ok(answer) => Some(answer),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(target: "zm_mcp", method, panic = %what, "a request panicked");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that panics is answered, as `internal`, and the panic's
    /// words stay in the log.
    #[tokio::test]
    async fn a_panicking_call_is_answered_as_internal() {
        let call = async {
            let answer: Result<rmcp::model::CallToolResult, McpError> =
                Ok(envelope::failure(&ToolError::not_found("x")));
            if answer.is_ok() {
                panic!("boom: a secret detail");
            }
            answer
        };
        let out = answer_or_internal(call).await.expect("answered");
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(v["isError"], true, "{v}");
        let body: Value = serde_json::from_str(v["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "internal", "{v}");
        assert!(!v.to_string().contains("secret"), "{v}");
        // One that does not panic is its own answer.
        let fine = answer_or_internal(async { Ok(envelope::failure(&ToolError::not_found("x"))) })
            .await
            .unwrap();
        let v = serde_json::to_value(&fine).unwrap();
        assert!(
            v["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not_found")
        );
    }

    /// Another request that panics is answered with JSON-RPC's internal
    /// error, without the panic's words; one that does not is its answer.
    #[tokio::test]
    async fn a_panicking_request_is_an_internal_error() {
        let boom = async {
            let answer: Result<u8, McpError> = Ok(1);
            if answer.is_ok() {
                panic!("boom: a secret detail");
            }
            answer
        };
        let e = or_internal_error("resources/read", boom)
            .await
            .expect_err("an error");
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
        assert!(!e.message.contains("secret"), "{e:?}");
        assert!(e.data.is_none(), "{e:?}");
        let fine = or_internal_error("resources/read", async { Ok::<u8, McpError>(7) }).await;
        assert_eq!(fine.unwrap(), 7);
    }
}
