#!/usr/bin/env node
// Drive the built `zero-memory` with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk 1.x, the client most MCP hosts are built on),
// over stdio AND over Streamable HTTP (`zero-memory serve` on a loopback
// port, bearer token).
//
// usage: node .ci/ts-mcp/check.mjs BINARY WORKDIR
//
// Per transport it checks: initialize (server info, instructions, the
// contract version in capabilities.experimental), tools/list (18 tools, an
// outputSchema and all four annotation hints each), resources, templates,
// prompts, every tool's success on a small fixture (each success goes
// through the SDK's own outputSchema validation of structuredContent), every
// tool's `validation_failed` (a stray field), `not_found`, `conflict`, the
// `scope_target_required:` refusal, `forbidden` for a read-only token (HTTP),
// an unknown tool as a JSON-RPC error, and that every tool error comes back
// as an `isError` result — first text block the JSON error body, no
// structuredContent — instead of `callTool` throwing.
//
// The run must log NOTHING through console.warn / console.error or Node's
// process warnings (Ajv's "unknown format" warnings land there): any such
// line fails it. One summary line per transport: "N passed, N failed".

import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { format } from 'node:util';

// ---- every warning the run logs ------------------------------------------
// Installed before the SDK is loaded, so nothing it logs escapes.
const logged = [];
for (const level of ['warn', 'error']) {
    console[level] = (...args) => {
        logged.push(`console.${level}: ${format(...args)}`);
    };
}
process.on('warning', w => logged.push(`process warning: ${w.name}: ${w.message}`));
const say = line => process.stdout.write(`${line}\n`);

const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { McpError } = await import('@modelcontextprotocol/sdk/types.js');

const TOOL_COUNT = 18;
const CONTRACT_KEY = 'zero-memory/contract';
const NEVER_MEM = 'mem_0000000000000000.0000000000';
const NEVER_DISPUTE = 'mrq_0000000000000000.0000000000';
const PASSWORD = 'ts-mcp-password-not-secret';
const CLIENT_INFO = { name: 'ts-mcp-ci', version: '1.0.0' };

class CheckFailed extends Error {}
const expect = (cond, message) => {
    if (!cond) throw new CheckFailed(message);
};

function cli(binary, env, args, input) {
    const r = spawnSync(binary, args, { env, input, encoding: 'utf8', timeout: 120_000 });
    if (r.status !== 0) {
        throw new Error(`\`zero-memory ${args.join(' ')}\` failed (${r.status ?? r.signal}): ${r.stdout}${r.stderr}`);
    }
    return r.stdout;
}

function contractVersionOf(binary) {
    const out = cli(binary, process.env, ['--version']);
    const m = out.match(/contract (\d+\.\d+\.\d+)/);
    if (!m) throw new Error(`cannot read the contract version from \`${binary} --version\`: ${out}`);
    return m[1];
}

function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.once('error', reject);
        s.listen(0, '127.0.0.1', () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

// ---- result envelopes --------------------------------------------------------

const textBlocks = r => (r.content ?? []).filter(b => b.type === 'text').map(b => b.text);

function firstJson(r, what) {
    const first = (r.content ?? [])[0];
    expect(first?.type === 'text', `${what}: the first block is ${first?.type}, not text`);
    try {
        return JSON.parse(first.text);
    } catch (e) {
        throw new CheckFailed(`${what}: the first text block is not JSON (${e.message}): ${first.text.slice(0, 200)}`);
    }
}

function isDeepEqual(a, b) {
    return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
function sortKeys(v) {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (v && typeof v === 'object') {
        return Object.fromEntries(Object.keys(v).sort().map(k => [k, sortKeys(v[k])]));
    }
    return v;
}

/** A success: not isError, structuredContent (already validated by the SDK) mirrored first. */
function expectSuccess(r, what) {
    expect(!r.isError, `${what}: unexpected tool error: ${textBlocks(r)[0]}`);
    const out = r.structuredContent;
    expect(out && typeof out === 'object', `${what}: no structuredContent`);
    expect(isDeepEqual(firstJson(r, what), out), `${what}: the first block is not the structuredContent mirror`);
    return out;
}

/** A tool error handed back (not thrown): isError, body first, no structuredContent. */
function expectError(r, code, what) {
    expect(r.isError === true, `${what}: expected isError, got a success: ${textBlocks(r)[0]}`);
    expect(r.structuredContent === undefined, `${what}: a tool error carries structuredContent`);
    const body = firstJson(r, what);
    const err = body?.error;
    expect(err && typeof err === 'object', `${what}: the first block is not {"error": {...}}: ${JSON.stringify(body)}`);
    expect(err.code === code, `${what}: expected code ${code}, got ${err.code} (${err.message})`);
    expect(typeof err.message === 'string', `${what}: the error has no message`);
    return err;
}

// ---- one transport's run -----------------------------------------------------

class Run {
    constructor(name) {
        this.name = name;
        this.passed = [];
        this.failed = [];
    }
    async check(label, fn) {
        try {
            await fn();
            this.passed.push(label);
        } catch (e) {
            const why = e instanceof CheckFailed ? e.message : `${e?.name}: ${e?.message}\n${e?.stack ?? ''}`;
            this.failed.push([label, why]);
        }
    }
}

async function connect(transport) {
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    const errors = [];
    client.onerror = e => errors.push(`${e?.name}: ${e?.message}`);
    await client.connect(transport);
    return { client, errors };
}

/** Every check that is the same over both transports. `ctx.http` adds the HTTP-only ones. */
async function exercise(run, client, ctx) {
    const call = (name, args) => client.callTool({ name, arguments: args });
    const s = {};
    const tag = `ts-mcp ${run.name}`;

    await run.check('initialize', async () => {
        const info = client.getServerVersion();
        expect(info?.name === 'zero-memory', `serverInfo is ${JSON.stringify(info)}`);
        const announced = client.getServerCapabilities()?.experimental?.[CONTRACT_KEY]?.version;
        expect(announced === ctx.contract, `experimental[${CONTRACT_KEY}].version is ${announced}, expected ${ctx.contract}`);
        expect((client.getInstructions() ?? '').length > 0, 'no instructions');
    });

    await run.check('tools/list', async () => {
        const { tools } = await client.listTools();
        const names = tools.map(t => t.name);
        expect(tools.length === TOOL_COUNT, `tools/list returned ${tools.length} tools: ${names}`);
        for (const t of tools) {
            expect(t.outputSchema?.type === 'object', `${t.name} has no object outputSchema`);
            expect(t.inputSchema?.type === 'object', `${t.name} has no object inputSchema`);
            for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) {
                expect(typeof t.annotations?.[hint] === 'boolean', `${t.name}: ${hint} is not a boolean`);
            }
            expect(t.annotations.openWorldHint === false, `${t.name}: openWorldHint is not false`);
        }
        s.tools = names;
    });

    await run.check('resources, templates and prompts', async () => {
        const { resources } = await client.listResources();
        expect(resources.some(r => r.uri === 'zm://rules'), `no zm://rules in ${JSON.stringify(resources)}`);
        const { resourceTemplates } = await client.listResourceTemplates();
        expect(
            resourceTemplates.some(t => t.uriTemplate === 'zm://memory/{id}'),
            `no zm://memory/{id} template in ${JSON.stringify(resourceTemplates)}`
        );
        const { prompts } = await client.listPrompts();
        expect(prompts.some(p => p.name === 'brief'), `no brief prompt in ${JSON.stringify(prompts)}`);
        const brief = await client.getPrompt({ name: 'brief', arguments: { topic: 'the ts-mcp check' } });
        expect(brief.messages.length > 0, 'the brief prompt has no messages');
    });

    // Before anything attaches a project to this connection.
    await run.check('scope_target_required refusal', async () => {
        const r = await call('remember', { content: `A ${tag} fact with nowhere to go.` });
        const err = expectError(r, 'validation_failed', 'remember without scope');
        expect(
            String(err.message).startsWith('scope_target_required:'),
            `the message does not start with scope_target_required: ${err.message}`
        );
    });

    await run.check('every tool: validation_failed for a stray field', async () => {
        expect(Array.isArray(s.tools), 'tools/list failed');
        for (const name of s.tools) {
            // Authorisation comes first: over HTTP the ordinary token may not
            // delete the account at all (account:delete is a scope of its own).
            if (name === 'delete_account' && run.name === 'http') {
                expectError(await call(name, { ts_mcp_stray_field: 1 }), 'forbidden', `${name}(stray field, no account:delete)`);
                continue;
            }
            const err = expectError(await call(name, { ts_mcp_stray_field: 1 }), 'validation_failed', `${name}(stray field)`);
            const paths = (err.details?.fields ?? []).map(f => f.path);
            expect(paths.includes('ts_mcp_stray_field'), `${name}: details.fields does not name the stray field: ${paths}`);
        }
    });

    await run.check('validation_failed (empty content)', async () => {
        const err = expectError(await call('remember', { content: '', scope: 'personal' }), 'validation_failed', "remember(content='')");
        const paths = (err.details?.fields ?? []).map(f => f.path);
        expect(paths.includes('content'), `details.fields does not name content: ${paths}`);
    });

    await run.check('not_found', async () => {
        expectError(await call('forget', { memory_id: NEVER_MEM }), 'not_found', 'forget(never-existing id)');
        expectError(await call('get_conflict', { dispute_id: NEVER_DISPUTE }), 'not_found', 'get_conflict(never)');
        expectError(
            await call('resolve_conflict', { dispute_id: NEVER_DISPUTE, keep_both: true }),
            'not_found',
            'resolve_conflict(never)'
        );
    });

    await run.check('unknown tool is a JSON-RPC error', async () => {
        let thrown;
        try {
            await call('no_such_tool', {});
        } catch (e) {
            thrown = e;
        }
        expect(thrown instanceof McpError, `expected an McpError, got ${thrown}`);
    });

    // ---- the fixture: every tool succeeds once
    await run.check('build_context (briefing)', async () => {
        const out = expectSuccess(
            await call('build_context', { topic: `${tag} fixture`, briefing: true, project_hint: ctx.projectHint }),
            'build_context'
        );
        expect(typeof out.project_scope === 'string' && out.project_scope.startsWith('proj.'), `project_scope ${out.project_scope}`);
        expect(typeof out.session?.thread === 'string', `no session.thread: ${JSON.stringify(out.session)}`);
        s.project = out.project_scope;
        s.thread = out.session.thread;
    });

    const remember = async (key, args) => {
        const r = await call('remember', args);
        const out = expectSuccess(r, `remember ${key}`);
        expect(String(out.memory_id).startsWith('mem_'), `memory_id: ${out.memory_id}`);
        const footer = textBlocks(r).at(-1);
        expect(r.content.length >= 2 && footer.includes('session:'), `no session footer: ${footer}`);
        s[key] = out.memory_id;
        return out;
    };

    await run.check('remember', async () => {
        s.factText = `The ${tag} check stores this fact about zebra crossings.`;
        await remember('fact', { content: s.factText, scope: 'personal' });
        const inProject = await remember('decision', {
            content: `The ${tag} decision: the billing service uses event sourcing.`,
            kind: 'decision',
            thread: s.thread,
            entities: [{ name: 'ts-billing-service', type: 'service' }]
        });
        expect(inProject.scope === s.project, `the thread's write landed in ${inProject.scope}, not ${s.project}`);
        await remember('other', { content: `The ${tag} decision: the billing service uses CRUD tables.`, kind: 'decision', scope: s.project });
        await remember('task', { content: `The ${tag} task: rotate the billing database password.`, kind: 'task', scope: s.project });
        await remember('pref', { content: `The ${tag} preference: tabs in Makefiles.`, kind: 'preference', scope: 'personal' });
        await remember('loose', { content: `The ${tag} note that belongs to the project.`, scope: 'personal' });
    });

    await run.check('recall', async () => {
        expect(s.fact, 'remember did not succeed');
        const r = await call('recall', { query: `${tag} zebra crossings` });
        const out = expectSuccess(r, 'recall');
        const ids = (out.memories ?? []).map(h => h.id);
        expect(ids.includes(s.fact), `recall did not find ${s.fact}: ${ids}`);
        const wanted = `zm://memory/${s.fact}`;
        const links = r.content.filter(b => b.type === 'resource_link').map(b => b.uri);
        expect(links.includes(wanted), `no resource_link to ${wanted}: ${links}`);
        expect(textBlocks(r).at(-1).includes('--- reminder ---'), 'the footer lacks the reminder');
        const read = await client.readResource({ uri: wanted });
        expect(read.contents.length === 1, `${read.contents.length} contents`);
        const row = JSON.parse(read.contents[0].text);
        expect(row.id === s.fact && row.content === s.factText, `read ${row.id}: the content differs`);
    });

    await run.check('build_context (topic)', async () => {
        const out = expectSuccess(await call('build_context', { topic: `${tag} billing service`, thread: s.thread }), 'build_context');
        expect(Array.isArray(out.memories), 'no memories');
    });

    await run.check('forget, restore_memory and conflict', async () => {
        expect(s.fact, 'remember did not succeed');
        expectSuccess(await call('forget', { memory_id: s.fact, reason: 'checking forget' }), 'forget');
        expectError(await call('forget', { memory_id: s.fact }), 'conflict', 'forget twice');
        expectSuccess(await call('restore_memory', { memory_id: s.fact }), 'restore_memory');
    });

    await run.check('close_loop', async () => {
        expectSuccess(await call('close_loop', { memory_id: s.task }), 'close_loop');
        expectError(await call('close_loop', { memory_id: s.task }), 'conflict', 'close_loop twice');
    });

    await run.check('share', async () => {
        expectSuccess(await call('share', { memory_id: s.fact, scope: s.project }), 'share');
    });

    await run.check('move_memories', async () => {
        const out = expectSuccess(await call('move_memories', { memory_ids: [s.loose], scope: s.project }), 'move_memories');
        expect(JSON.stringify(out).includes(s.loose), `the move does not name ${s.loose}: ${JSON.stringify(out)}`);
    });

    await run.check('link (entities and memories)', async () => {
        expectSuccess(await call('link', { src: 'ts-billing-service', dst: 'postgres', type: 'depends_on' }), 'link entities');
        expectSuccess(await call('link', { src: s.decision, dst: s.other, type: 'contradicts' }), 'link contradicts');
    });

    await run.check('entities', async () => {
        const out = expectSuccess(await call('entities', { query: 'ts-billing' }), 'entities');
        expect(JSON.stringify(out).includes('ts-billing-service'), `entities: ${JSON.stringify(out)}`);
    });

    await run.check('challenge, list_conflicts, get_conflict, resolve_conflict', async () => {
        const ch = expectSuccess(await call('challenge', { memory_id: s.pref, reason: 'the team moved to spaces' }), 'challenge');
        expect(typeof ch.dispute_id === 'string', `challenge: no dispute_id: ${JSON.stringify(ch)}`);
        const list = expectSuccess(await call('list_conflicts', {}), 'list_conflicts');
        const ids = (list.conflicts ?? []).map(c => c.dispute_id);
        expect(ids.includes(ch.dispute_id), `list_conflicts lacks ${ch.dispute_id}: ${ids}`);
        expectSuccess(await call('get_conflict', { dispute_id: ch.dispute_id }), 'get_conflict');
        expectSuccess(await call('resolve_conflict', { dispute_id: ch.dispute_id, keep_both: true }), 'resolve_conflict');
        expectError(
            await call('resolve_conflict', { dispute_id: ch.dispute_id, keep_both: true }),
            'conflict',
            'resolve_conflict twice'
        );
    });

    await run.check('promote_rule', async () => {
        expectSuccess(await call('promote_rule', { memory_id: s.pref }), 'promote_rule');
        const rules = await client.readResource({ uri: 'zm://rules' });
        expect(rules.contents[0].text.includes('tabs in Makefiles'), `zm://rules: ${rules.contents[0].text}`);
    });

    await run.check('import_memory', async () => {
        const args = {
            content: `The ${tag} imported convention: commit messages in the imperative.`,
            kind: 'convention',
            target: 'personal',
            source_path: 'CLAUDE.md',
            source_hash: `sha256-ts-mcp-${run.name}`
        };
        expectSuccess(await call('import_memory', args), 'import_memory');
        const again = expectSuccess(await call('import_memory', args), 'import_memory again');
        expect(again.skipped === true, `the same source_hash was not skipped: ${JSON.stringify(again)}`);
    });

    await run.check('export_memories', async () => {
        // It pages: follow `next_cursor` (pages of one, so it is followed).
        const items = [];
        let args = { limit: 1 };
        for (let pages = 0; ; pages++) {
            expect(pages < 1000, 'export_memories never ends');
            const out = expectSuccess(await call('export_memories', args), 'export_memories');
            expect(out.count === out.items.length, `count is not the page's: ${JSON.stringify(out)}`);
            items.push(...out.items);
            if (out.next_cursor === undefined) break;
            args = { limit: 1, cursor: out.next_cursor };
        }
        expect(items.length > 1, `one page held everything: ${items.length}`);
        expect(new Set(items.map((m) => m.id)).size === items.length, 'the export lists a memory twice');
        expect(JSON.stringify(items).includes(s.fact), 'the export lacks the fact');
    });

    if (ctx.http) await ctx.http(run, client, s);

    await run.check('delete_account', async () => {
        const victim = ctx.victim ? await ctx.victim() : { client, close: async () => {} };
        try {
            const out = expectSuccess(await victim.client.callTool({ name: 'delete_account', arguments: {} }), 'delete_account');
            expect(typeof out.subject === 'string', `delete_account: ${JSON.stringify(out)}`);
        } finally {
            await victim.close();
        }
    });
}

// ---- stdio -------------------------------------------------------------------

async function runStdio(binary, work, contract) {
    const run = new Run('stdio');
    const data = path.join(work, 'stdio-data');
    rmSync(data, { recursive: true, force: true });
    mkdirSync(data, { recursive: true });
    cli(binary, process.env, ['--data-dir', data, '--log', 'warn', 'user', 'add', 'ts-stdio@example.com', '--password-stdin'], `${PASSWORD}\n`);
    const cwd = mkdtempSync(path.join(os.tmpdir(), 'zm-ts-mcp-')); // empty, not a git repository
    const stderr = [];
    const transport = new StdioClientTransport({
        command: binary,
        args: ['--data-dir', data, '--log', 'warn', 'stdio', '--no-project'],
        cwd,
        stderr: 'pipe'
    });
    transport.stderr?.on('data', d => stderr.push(String(d)));
    try {
        const { client, errors } = await connect(transport);
        await exercise(run, client, { contract, projectHint: '/src/ts-mcp-stdio' });
        await client.close();
        if (errors.length) run.failed.push(['client errors', errors.join('\n')]);
    } catch (e) {
        run.failed.push(['connect', `${e?.name}: ${e?.message}\n${e?.stack}`]);
    } finally {
        rmSync(cwd, { recursive: true, force: true });
    }
    if (run.failed.length && stderr.length) run.failed.push(['server stderr', stderr.join('')]);
    return run;
}

// ---- Streamable HTTP ---------------------------------------------------------

async function runHttp(binary, work, contract) {
    const run = new Run('http');
    const data = path.join(work, 'http-data');
    rmSync(data, { recursive: true, force: true });
    mkdirSync(data, { recursive: true });
    const port = await freePort();
    const env = { ...process.env, ZM_DATA_DIR: data, ZM_LISTEN: `127.0.0.1:${port}`, ZM_LOG: 'warn' };
    delete env.ZM_DATABASE_URL;
    const token = (email, readOnly = false, allowAccountDelete = false) => {
        const out = cli(binary, env, ['token', 'create', '--user', email, ...(readOnly ? ['--read-only'] : []), ...(allowAccountDelete ? ['--allow-account-delete'] : [])]);
        const m = out.match(/zm_pat_[A-Za-z0-9]+/);
        if (!m) throw new Error(`no token in: ${out}`);
        return m[0];
    };
    for (const who of ['ts-http', 'ts-victim']) {
        cli(binary, env, ['user', 'add', `${who}@example.com`, '--password-stdin'], `${PASSWORD}\n`);
    }
    const tokens = { rw: token('ts-http@example.com'), ro: token('ts-http@example.com', true), victim: token('ts-victim@example.com', false, true) };
    const logPath = path.join(data, 'serve.log');
    const log = openSync(logPath, 'a');
    const server = spawn(binary, ['serve'], { env, stdio: ['ignore', log, log] });
    const url = new URL(`http://127.0.0.1:${port}/mcp`);
    const open = async bearer => {
        const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${bearer}` } } });
        const { client, errors } = await connect(transport);
        return {
            client,
            transport,
            errors,
            close: async () => {
                await transport.terminateSession(); // DELETE /mcp
                await client.close();
            }
        };
    };
    try {
        const deadline = Date.now() + 60_000;
        for (;;) {
            expect(server.exitCode === null, `serve exited early with ${server.exitCode}; see ${logPath}`);
            const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(r => r.ok, () => false);
            if (ready) break;
            expect(Date.now() < deadline, 'serve did not become ready');
            await sleep(200);
        }
        const main = await open(tokens.rw);
        expect(main.transport.sessionId, 'no Mcp-Session-Id after initialize');
        const extraErrors = [];
        await exercise(run, main.client, {
            contract,
            projectHint: '/src/ts-mcp-http',
            http: async (r, _client, s) => {
                await r.check('forbidden for a read-only token', async () => {
                    const ro = await open(tokens.ro);
                    try {
                        const err = expectError(
                            await ro.client.callTool({ name: 'remember', arguments: { content: 'A read-only write.', scope: 'personal' } }),
                            'forbidden',
                            'remember with a read-only token'
                        );
                        expect(typeof err.message === 'string', 'no message');
                        expectError(
                            await ro.client.callTool({ name: 'forget', arguments: { memory_id: s.fact ?? NEVER_MEM } }),
                            'forbidden',
                            'forget with a read-only token'
                        );
                        // A read tool works with it.
                        expectSuccess(await ro.client.callTool({ name: 'recall', arguments: { query: 'zebra crossings' } }), 'recall (read-only)');
                    } finally {
                        await ro.close();
                        extraErrors.push(...ro.errors);
                    }
                });
            },
            victim: async () => {
                const v = await open(tokens.victim);
                return {
                    client: v.client,
                    close: async () => {
                        // The account (and its token) is gone: end the session without DELETE.
                        await v.client.close();
                        extraErrors.push(...v.errors);
                    }
                };
            }
        });
        await run.check('session termination (DELETE /mcp)', async () => {
            await main.close();
            expect(main.transport.sessionId === undefined, 'the session id survived DELETE');
        });
        const errors = [...main.errors, ...extraErrors];
        if (errors.length) run.failed.push(['client errors', errors.join('\n')]);
    } catch (e) {
        run.failed.push(['connect', `${e?.name}: ${e?.message}\n${e?.stack}`]);
    } finally {
        server.kill('SIGTERM');
        await new Promise(resolve => (server.exitCode !== null ? resolve() : server.once('exit', resolve)));
    }
    if (run.failed.length) {
        try {
            run.failed.push(['serve.log (tail)', readFileSync(logPath, 'utf8').split('\n').slice(-20).join('\n')]);
        } catch {
            // no log
        }
    }
    return run;
}

// ---- main --------------------------------------------------------------------

async function main() {
    const [binaryArg, workArg] = process.argv.slice(2);
    if (!binaryArg || !workArg) {
        process.stderr.write('usage: node check.mjs BINARY WORKDIR\n');
        return 2;
    }
    const binary = path.resolve(binaryArg);
    const work = path.resolve(workArg);
    mkdirSync(work, { recursive: true });
    const contract = contractVersionOf(binary);
    say(`ts-mcp: @modelcontextprotocol/sdk ${sdkVersion()} on Node ${process.versions.node}, contract ${contract}`);
    let failed = false;
    for (const go of [runStdio, runHttp]) {
        const before = logged.length;
        const run = await go(binary, work, contract);
        for (const line of logged.slice(before)) run.failed.push(['logged a warning', line]);
        for (const [label, why] of run.failed) process.stderr.write(`ts-mcp ${run.name}: FAILED ${label}: ${why}\n`);
        say(`ts-mcp ${run.name}: ${run.passed.length} passed, ${run.failed.length} failed`);
        failed ||= run.failed.length > 0;
    }
    if (failed) {
        process.stderr.write('ts-mcp: FAILED (see above)\n');
        return 1;
    }
    return 0;
}

function sdkVersion() {
    const pkg = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
    return JSON.parse(readFileSync(pkg, 'utf8')).version;
}

process.exitCode = await main();
