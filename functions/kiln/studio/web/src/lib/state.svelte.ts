// Session-wide state: who is signed in, the current route, a toast line, the runs kept for
// comparison. Routes live in the hash so reloads and the back button work without a server.
import { Api, type Whoami, type RunReply, type Tool, type ToolUsage } from "./api";
import { forgetKey, loadKey, storeKey } from "./session";

export interface Route {
  screen:
    | "tools" | "tool" | "new" | "keys" | "connect" | "deleted" | "views" | "view" | "calls"
    | "approvals" | "connections" | "notfound";
  tool?: string;
  tab?: string;
  view?: string;
}

export const TOOL_TABS = ["code", "schema", "test", "history", "package", "secrets", "settings", "usage"];
const SCREENS = ["new", "keys", "connect", "deleted", "views", "calls", "approvals", "connections"] as const;

export interface KeptRun {
  id: number;
  tool: string;
  revision: number;
  args: unknown;
  reply: RunReply;
  at: string;
}

/** The screen a hash names; anything the studio does not have is "notfound". */
export function parseRoute(hash: string): Route {
  let parts: string[];
  try {
    parts = hash.replace(/^#\/?/, "").replace(/\/$/, "").split("/").map(decodeURIComponent);
  } catch {
    return { screen: "notfound" }; // a broken %-escape
  }
  const [first = "", second, third, ...rest] = parts;
  if (first === "" || (first === "tools" && second === undefined)) return { screen: "tools" };
  if (first === "tools" && second && rest.length === 0) {
    const tab = third || "code";
    return TOOL_TABS.includes(tab) ? { screen: "tool", tool: second, tab } : { screen: "notfound" };
  }
  if (first === "views" && second && third === undefined) return { screen: "view", view: second };
  if ((SCREENS as readonly string[]).includes(first) && second === undefined)
    return { screen: first as Route["screen"] };
  return { screen: "notfound" };
}

export function href(route: Route): string {
  if (route.screen === "tool" && route.tool)
    return `#/tools/${encodeURIComponent(route.tool)}/${route.tab ?? "code"}`;
  if (route.screen === "view" && route.view) return `#/views/${encodeURIComponent(route.view)}`;
  return `#/${route.screen}`;
}

class Studio {
  api = $state<Api | null>(null);
  who = $state<Whoami | null>(null);
  route = $state<Route>(parseRoute(location.hash));
  notice = $state<{ text: string; kind: "ok" | "error" } | null>(null);
  runs = $state<KeptRun[]>([]);
  /** Filters the Calls screen opens with (set by a tool's Usage tab). */
  callFilters = $state<{ tool?: string }>({});
  /** The tool list asked for together with whoami on a resumed session (one round trip less). */
  prefetched: Promise<{ tools: Tool[] }> | null = null;
  /** Its usage columns, asked for as soon as whoami says the key is an author's. */
  prefetchedUsage: Promise<{ tools: Record<string, ToolUsage> } | null> | null = null;
  private noticeTimer: ReturnType<typeof setTimeout> | undefined;

  get author(): boolean {
    return Boolean(this.who?.scopes.includes("author"));
  }

  async signIn(key: string, prefetchUsage = false): Promise<void> {
    const api = new Api(key.trim());
    this.who = await api.whoami();
    // Before the list mounts (setting `api` renders it), so it finds the request under way.
    if (prefetchUsage && this.author) this.prefetchedUsage = api.callsByTool(24).catch(() => null);
    api.onUnauthorized = () => {
      this.signOut();
      this.say("Your key is no longer accepted (revoked or expired): sign in again.", "error");
    };
    this.api = api;
    storeKey(key.trim());
  }

  async resume(): Promise<void> {
    const key = loadKey();
    if (!key) return;
    const onList = parseRoute(location.hash).screen === "tools";
    this.prefetched = onList ? new Api(key).tools() : null;
    this.prefetched?.catch(() => undefined);
    try {
      await this.signIn(key, onList);
    } catch {
      this.prefetched = null;
      forgetKey();
    }
  }

  takePrefetched(): Promise<{ tools: Tool[] }> | null {
    const list = this.prefetched;
    this.prefetched = null;
    return list;
  }

  takePrefetchedUsage(): Promise<{ tools: Record<string, ToolUsage> } | null> | null {
    const usage = this.prefetchedUsage;
    this.prefetchedUsage = null;
    return usage;
  }

  signOut(): void {
    forgetKey();
    this.api = null;
    this.who = null;
    this.prefetchedUsage = null;
    this.runs = [];
    location.hash = "#/tools";
  }

  go(route: Route): void {
    location.hash = href(route);
  }

  say(text: string, kind: "ok" | "error" = "ok"): void {
    this.notice = { text, kind };
    clearTimeout(this.noticeTimer);
    this.noticeTimer = setTimeout(() => (this.notice = null), kind === "error" ? 8000 : 3500);
  }

  keep(run: Omit<KeptRun, "id">): void {
    const id = (this.runs[0]?.id ?? 0) + 1;
    this.runs = [{ ...run, id }, ...this.runs].slice(0, 20);
  }
}

export const studio = new Studio();

window.addEventListener("hashchange", () => {
  studio.route = parseRoute(location.hash);
});
