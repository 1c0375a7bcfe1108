import { afterEach, describe, expect, it, vi } from "vitest";
import { Api, idempotencyKey } from "../src/lib/api";

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("idempotency keys", () => {
  it("are fresh each time and fit the server's rule", () => {
    const keys = new Set(Array.from({ length: 50 }, () => idempotencyKey()));
    expect(keys.size).toBe(50);
    for (const key of keys) expect(key).toMatch(/^[A-Za-z0-9_.:~+/=-]{1,255}$/);
  });

  it("go with every call the console makes and every test run, one per request", async () => {
    const sent: Record<string, string>[] = [];
    const answer = { jsonrpc: "2.0", id: 1, result: { content: [], isError: false }, ok: true };
    // The network, not the client: what the browser's fetch would send is kept.
    vi.stubGlobal("fetch", async (_url: string, init: RequestInit) => {
      sent.push(init.headers as Record<string, string>);
      return new Response(JSON.stringify(answer), { headers: { "Content-Type": "application/json" } });
    });
    const api = new Api("author-key", "http://127.0.0.1:9");
    await api.callTool("wipe", { target: "a" });
    await api.callTool("wipe", { target: "a" });
    await api.run("wipe", { target: "a" });
    const keys = sent.map((headers) => headers["Idempotency-Key"]);
    expect(keys.every((key) => typeof key === "string" && key.length > 0)).toBe(true);
    expect(new Set(keys).size).toBe(3);
  });
});
