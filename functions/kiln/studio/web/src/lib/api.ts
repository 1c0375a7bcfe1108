// Every request carries the bearer key in a header (never a cookie, never the URL), so the
// studio has no CSRF surface; the key lives only in memory and session storage.

import { readEvents } from "./events";
import type { TaskMode } from "./manifest";

export type Language = "python" | "node";

export interface Violation {
  field: string;
  rule: string;
  message: string;
}

export interface BundleSummary {
  id: string;
  status: string;
  error?: string | null;
  requirements?: string[];
  finished_at?: string | null;
}

export interface ToolFields {
  title: string | null;
  description: string;
  language: Language;
  requirements: string[];
  input_schema: Record<string, unknown>;
  output_schema: Record<string, unknown> | null;
  annotations: Record<string, boolean> | null;
  timeout_seconds: number;
  secrets: string[];
  task: TaskMode;
  tags: string[];
  calls: string[]; // the tools its script may call (runner/TALKING.md, "Calling tools")
  // the caller's own OAuth tokens it needs (kiln/connections/README.md); kept as saved
  connections: { provider: string; scopes: string[] }[];
  code?: string;
  files?: Record<string, string>; // relative path -> base64 (only with source)
}


export interface Tool extends ToolFields {
  id: string;
  name: string;
  enabled: boolean;
  revision: number;
  fingerprint?: string | null; // sha256:<hex> over what it is and what runs (catalog/README.md)
  bundle_id: string | null;
  created_at: string;
  updated_at: string;
  deleted?: boolean;
  bundle?: BundleSummary | null;
}

export interface Revision extends ToolFields {
  revision: number;
  created_at: string;
  created_by: string | null;
  restored_from: number | null;
  bundle_id: string | null;
  fingerprint?: string | null; // under the tool's name now
}

/** Exactly the manifest fields (lib/manifest.ts), each one carried through a save. */
export interface Draft extends ToolFields {
  name: string;
  code: string;
  enabled: boolean;
  files: Record<string, string>;
}

export interface RunReply {
  ok: boolean;
  stdout?: string;
  stderr?: string;
  exit_code?: number | null;
  timed_out?: boolean;
  duration_ms?: number;
  applied_timeout_s?: number;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  error?: string;
  text?: string;
  mcp_result?: McpResult;
  talk?: Talk[];
  questions?: Question[];
}

/** A progress or log line the script wrote on its talk channel while it ran. */
export interface Talk {
  kind: "progress" | "log";
  progress?: number;
  total?: number | null;
  message?: string | null;
  level?: string;
  data?: unknown;
  logger?: string | null;
}

/** A question the run asked (its MCP request's method and params) instead of answering. */
export interface Question {
  key: string;
  method: "elicitation/create" | "sampling/createMessage" | "roots/list";
  params: Record<string, unknown>;
}

export interface McpResult {
  content: ContentBlock[];
  isError?: boolean;
  structuredContent?: unknown;
}

export type ContentBlock = { type: string; [key: string]: unknown };

export interface SyntaxProblem {
  line: number;
  column: number;
  message: string;
}

export interface ValidateReply {
  ok: boolean;
  violations: Violation[];
  syntax: SyntaxProblem | null;
  breaking?: Finding[]; // what saving it over the tool's head would break
}

/** One thing a save breaks for the tool's clients (kiln.catalog.breaking). */
export interface Finding {
  kind: string;
  path: string;
  old: unknown;
  new: unknown;
  message: string;
}

export interface Whoami {
  kind: string;
  name: string;
  label?: string; // as revisions name their author (`created_by`), e.g. key:laptop
  scopes: string[];
}

export interface Quota {
  calls_per_minute?: number | null;
  run_seconds_per_day?: number | null;
}

export interface QuotaUsage {
  calls_this_minute: number;
  calls_today: number;
  run_seconds_today: number;
}

export interface KeyInfo {
  name: string;
  scope: string;
  id?: string;
  created_at?: string;
  last_used_at?: string | null;
  revoked_at?: string | null;
  key?: string;
  view?: string | null;
  quota?: Quota;
  usage?: QuotaUsage;
}

export interface ViewDef {
  name: string;
  description: string;
  tools: string[]; // add_vat, add_vat@3, tag:finance
  published: boolean;
  anonymous: boolean;
  quota?: Quota;
  oauth_scopes?: string[];
  oauth_clients?: string[];
  confirm?: "destructive" | "writes";
  // search: the meta-tools search_tools, describe_tools, call_tool; code: search_tools,
  // describe_tools and execute (Python that calls the view's tools)
  mode?: "list" | "search" | "code";
}

export interface View extends ViewDef {
  revision: number;
  updated_at: string;
  updated_by: string;
  shows?: { name: string; revision: number }[];
  usage?: QuotaUsage;
}

// `not_ready`: called while the tool's packages were being built (not the tool's error).
export type Outcome = "ok" | "tool_error" | "timeout" | "refused" | "cancelled" | "not_ready";
export const OUTCOMES: Outcome[] = ["ok", "tool_error", "timeout", "refused", "cancelled", "not_ready"];

export interface CallEntry {
  id: string;
  at: string;
  caller: string;
  tool: string;
  outcome: Outcome;
  revision: number | null;
  view: string | null;
  duration_ms: number;
  output_bytes: number;
  detail: string | null;
  /** An inner call's: the id of the call that made it (a script's call, a code-mode run). */
  parent?: string | null;
}

export type CallFilters = {
  tool?: string;
  parent?: string;
  caller?: string;
  view?: string;
  outcome?: string;
  since?: string;
  until?: string;
  cursor?: string;
  limit?: number;
};

export interface ToolUsage {
  calls: number;
  errors: number;
  not_ready: number; // calls made while its packages were built: not in error_rate
  error_rate: number;
}

export interface ChartBucket {
  start: string;
  calls: number;
  errors: number;
  p50_ms: number | null;
  p99_ms: number | null;
}

export interface Chart {
  tool: string;
  range: "hour" | "day" | "month";
  bucket_s: number;
  buckets: ChartBucket[];
  outcomes: Record<Outcome, number>;
  totals: { calls: number; errors: number; p50_ms: number | null; p99_ms: number | null };
}

export interface SecretState {
  name: string;
  set: boolean;
}

export interface BundleDetail extends BundleSummary {
  lock?: unknown;
  log?: string | null;
  target?: string;
  started_at?: string | null;
  size?: number | null;
}

/** A call waiting for a person's approval (GET /api/approvals). */
export interface Approval {
  id: string;
  state: "pending" | "approved" | "running" | "denied" | "expired";
  tool: string;
  revision: number;
  head: number;
  arguments: unknown;
  caller: string;
  view: string | null;
  approvers: string[];
  created_at: string;
  expires_at: string;
  decided_by: string | null;
  decided_at?: string;
  reason: string | null;
  can_decide?: boolean;
  why_not?: string | null;
}

/** An OAuth provider an operator registered (GET /api/connections/providers): never its
 *  client secret, which is write-only. Fields a later server adds are kept and shown. */
export interface Provider {
  name: string;
  authorize_url: string;
  token_url: string;
  client_id: string;
  scopes: string[];
  revoke_url: string | null;
  issuer: string | null;
  [more: string]: unknown;
}

/** What a provider's PUT takes: endpoints or an issuer, and the secret only when it changes. */
export interface ProviderInput {
  issuer?: string;
  authorize_url?: string;
  token_url?: string;
  revoke_url?: string;
  client_id: string;
  client_secret?: string;
  scopes: string[];
}

/** A caller's connection to a provider (never its tokens). */
export interface Connection {
  identity: string; // key:<key id>, key:<name> for the server's own key, jwt:<subject>
  provider: string;
  scopes: string[];
  expires_at: string | null; // the access token's; refreshed before a run gets it
  connected_at: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }

  get violations(): Violation[] {
    const list = this.body["violations"];
    return Array.isArray(list) ? (list as Violation[]) : [];
  }
}

export class Api {
  /** Called when the server no longer accepts the key (revoked while signed in). */
  onUnauthorized: (() => void) | null = null;

  constructor(
    private readonly key: string,
    private readonly base = "",
  ) {}

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ data: T; etag: string | null }> {
    const init: RequestInit = {
      method,
      headers: { Authorization: `Bearer ${this.key}`, Accept: "application/json", ...headers },
      credentials: "omit",
      cache: "no-store",
    };
    if (body !== undefined) {
      (init.headers as Record<string, string>)["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.base + path, init);
    return this.settle<T>(response, await response.text());
  }

  private settle<T>(response: Response, text: string): { data: T; etag: string | null } {
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { error: { code: "bad_reply", message: text.slice(0, 200) } };
    }
    if (response.status === 401) this.onUnauthorized?.();
    if (!response.ok) {
      const error = ((data as Record<string, unknown>)?.["error"] ?? {}) as Record<string, unknown>;
      const message = String(error["message"] ?? `HTTP ${response.status}`);
      throw new ApiError(response.status, String(error["code"] ?? "error"), message, error);
    }
    return { data: data as T, etag: response.headers.get("ETag") };
  }

  async get<T>(path: string): Promise<T> {
    return (await this.request<T>("GET", path)).data;
  }

  whoami = () => this.get<Whoami>("/api/whoami");
  tools = (deleted = false) =>
    this.get<{ tools: Tool[] }>(`/api/tools${deleted ? "?include_deleted=true" : ""}`);
  tool = (ref: string) => this.request<Tool>("GET", `/api/tools/${enc(ref)}`);
  create = (draft: Draft) => this.request<Tool>("POST", "/api/tools", draft);
  save = (name: string, draft: Draft, revision: number, breaking = false) =>
    this.request<Tool>("PUT", `/api/tools/${enc(name)}`, breaking ? { ...draft, breaking } : draft, {
      "If-Match": `"${revision}"`,
    });
  validate = (draft: Partial<Draft>) =>
    this.request<ValidateReply>("POST", "/api/tools/validate", draft).then((r) => r.data);
  rename = (name: string, to: string) =>
    this.request<Tool>("POST", `/api/tools/${enc(name)}/rename`, { name: to });
  setEnabled = (name: string, on: boolean) =>
    this.request<Tool>("POST", `/api/tools/${enc(name)}/${on ? "enable" : "disable"}`);
  remove = (name: string) => this.request<Tool>("DELETE", `/api/tools/${enc(name)}`);
  run = (name: string, args: unknown, answers?: Record<string, unknown>) =>
    this.request<RunReply>("POST", `/api/tools/${enc(name)}/run`, { arguments: args, answers }, {
      "Idempotency-Key": idempotencyKey(),
    }).then((r) => r.data);
  /** A tools/call through Kiln's MCP endpoint as the signed-in author (a test run's call,
   *  made for real): its CallToolResult, or a JSON-RPC error as an isError result. */
  async callTool(name: string, args: unknown): Promise<Record<string, unknown>> {
    const message = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args ?? {} } };
    const { data } = await this.request<Record<string, unknown>>("POST", "/mcp", message, {
      "MCP-Protocol-Version": "2025-11-25",
      "Idempotency-Key": idempotencyKey(), // one per call made: never run twice by a resend
    });
    if (data && typeof data["result"] === "object") return data["result"] as Record<string, unknown>;
    const error = (data?.["error"] ?? {}) as Record<string, unknown>;
    return { content: [{ type: "text", text: `The call of '${name}' was refused: ${String(error["message"] ?? "no answer")}` }], isError: true };
  }
  /** An author test run whose progress and log lines reach `onTalk` as the script writes them. */
  async runLive(
    name: string,
    args: unknown,
    answers: Record<string, unknown> | undefined,
    onTalk: (line: Talk) => void,
  ): Promise<RunReply> {
    const response = await fetch(`${this.base}/api/tools/${enc(name)}/run`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${this.key}`,
        Accept: "text/event-stream",
        "Content-Type": "application/json",
        "Idempotency-Key": idempotencyKey(),
      },
      credentials: "omit",
      cache: "no-store",
      body: JSON.stringify({ arguments: args, answers }),
    });
    const streamed = (response.headers.get("Content-Type") ?? "").startsWith("text/event-stream");
    if (!response.ok || !streamed || !response.body) {
      return this.settle<RunReply>(response, await response.text()).data; // refusals, as usual
    }
    let reply: RunReply | null = null;
    let failed: Record<string, unknown> | null = null;
    await readEvents(response.body, (event) => {
      const got = event as { talk?: Talk; reply?: RunReply; error?: Record<string, unknown> };
      if (got.talk) onTalk(got.talk);
      if (got.reply) reply = got.reply;
      if (got.error) failed = got.error;
      return Boolean(got.reply || got.error);
    });
    if (reply) return reply;
    const error: Record<string, unknown> = failed ?? { message: "The run's answer ended before its result came." };
    throw new ApiError(502, "run_failed", String(error["message"]), error);
  }
  revisions = (ref: string) =>
    this.get<{ revisions: Revision[] }>(`/api/tools/${enc(ref)}/revisions`);
  revision = (ref: string, n: number) => this.get<Revision>(`/api/tools/${enc(ref)}/revisions/${n}`);
  restore = (name: string, n: number, head: number) =>
    this.request<Tool>("POST", `/api/tools/${enc(name)}/revisions/${n}/restore`, undefined, {
      "If-Match": `"${head}"`,
    });
  bundle = (id: string) => this.get<BundleDetail>(`/api/bundles/${enc(id)}?log=true`);
  retryBundle = (id: string) => this.request<BundleDetail>("POST", `/api/bundles/${enc(id)}/retry`);
  keys = () => this.get<{ keys: KeyInfo[] }>("/api/keys");
  createKey = (name: string, scope: string, view: string | null = null, quota: Quota = {}) =>
    this.request<KeyInfo>("POST", "/api/keys", { name, scope, view, quota }).then((r) => r.data);
  bindKey = (name: string, view: string | null, quota: Quota) =>
    this.request<KeyInfo>("PUT", `/api/keys/${enc(name)}/binding`, { view, quota }).then((r) => r.data);
  views = () => this.get<{ views: View[] }>("/api/views");
  view = (name: string) => this.request<View>("GET", `/api/views/${enc(name)}`).then((r) => r.data);
  createView = (view: ViewDef) => this.request<View>("POST", "/api/views", view).then((r) => r.data);
  saveView = (view: ViewDef, revision: number) =>
    this.request<View>("PUT", `/api/views/${enc(view.name)}`, view, { "If-Match": `"${revision}"` }).then(
      (r) => r.data,
    );
  removeView = (name: string) => this.request<View>("DELETE", `/api/views/${enc(name)}`);
  calls = (filters: CallFilters) =>
    this.get<{ calls: CallEntry[]; next_cursor: string | null }>(`/api/calls${query(filters)}`);
  /** Each tool's calls and errors over the last `hours` (this UTC hour so far and the
   * `hours - 1` before it), from the ledger's hourly totals. */
  callsByTool = (hours: number) =>
    this.get<{ tools: Record<string, ToolUsage> }>(`/api/calls/by-tool?hours=${hours}`);
  chart = (tool: string, range: string) =>
    this.get<Chart>(`/api/calls/chart${query({ tool, range })}`);
  revokeKey = (name: string) => this.request<unknown>("DELETE", `/api/keys/${enc(name)}`);
  approvals = () => this.get<{ approvals: Approval[] }>("/api/approvals");
  approve = (id: string) =>
    this.request<Approval>("POST", `/api/approvals/${enc(id)}/approve`).then((r) => r.data);
  deny = (id: string, reason: string | null) =>
    this.request<Approval>("POST", `/api/approvals/${enc(id)}/deny`, reason ? { reason } : {}).then(
      (r) => r.data,
    );
  providers = () => this.get<{ providers: Provider[] }>("/api/connections/providers");
  putProvider = (name: string, body: ProviderInput) =>
    this.request<Provider>("PUT", `/api/connections/providers/${enc(name)}`, body).then((r) => r.data);
  removeProvider = (name: string) => this.request<unknown>("DELETE", `/api/connections/providers/${enc(name)}`);
  /** The caller's own connections, or (an author key) everyone's. */
  connections = (all = false) =>
    this.get<{ connections: Connection[] }>(`/api/connections${all ? "?all=true" : ""}`);
  /** A link to Kiln's /connect page for the caller (10 minutes), to open in a browser. */
  connect = (provider: string, scopes: string[]) =>
    this.request<{ url: string; expires_in: number }>("POST", `/api/connections/${enc(provider)}/connect`, { scopes }).then(
      (r) => r.data,
    );
  /** Revoke the caller's own connection, or (an author key) the one of `identity`. */
  revokeConnection = (provider: string, identity?: string) =>
    this.request<unknown>("DELETE", `/api/connections/${enc(provider)}${query({ identity })}`);
  secrets = (tool: string) => this.get<{ secrets: SecretState[] }>(`/api/tools/${enc(tool)}/secrets`);
  setSecret = (tool: string, secret: string, value: string) =>
    this.request<unknown>("PUT", `/api/tools/${enc(tool)}/secrets/${enc(secret)}`, { value });
  removeSecret = (tool: string, secret: string) =>
    this.request<unknown>("DELETE", `/api/tools/${enc(tool)}/secrets/${enc(secret)}`);
}

/** A deep copy of JSON data (also of Svelte state proxies, which structuredClone refuses). */
export function clone<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

function query(params: Record<string, string | number | undefined>): string {
  const pairs = Object.entries(params).filter(([, v]) => v !== undefined && v !== "");
  return pairs.length ? `?${new URLSearchParams(pairs.map(([k, v]) => [k, String(v)]))}` : "";
}

/** A fresh idempotency key for one run or call (kiln.protocol.idempotency): a request sent
 *  again with it is answered with its first reply instead of running again. */
export function idempotencyKey(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function enc(part: string): string {
  return encodeURIComponent(part);
}

export function draftOf(tool: Tool | Revision, name: string): Draft {
  return {
    name,
    title: tool.title ?? null,
    description: tool.description,
    language: tool.language,
    code: tool.code ?? "",
    requirements: [...(tool.requirements ?? [])],
    input_schema: clone(tool.input_schema ?? { type: "object", properties: {} }),
    output_schema: tool.output_schema ? clone(tool.output_schema) : null,
    annotations: tool.annotations ? { ...tool.annotations } : null,
    timeout_seconds: tool.timeout_seconds,
    enabled: "enabled" in tool ? tool.enabled : true,
    secrets: [...(tool.secrets ?? [])],
    files: { ...(tool.files ?? {}) },
    task: tool.task ?? null,
    tags: [...(tool.tags ?? [])],
    calls: [...(tool.calls ?? [])],
    connections: clone(tool.connections ?? []),
  };
}
