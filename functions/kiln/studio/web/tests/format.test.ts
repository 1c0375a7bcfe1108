import { describe, expect, it } from "vitest";
import { ago, prettyJson, until } from "../src/lib/format";

describe("formatting", () => {
  it("pretty-prints stdout that is JSON and leaves other text alone", () => {
    expect(prettyJson('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(prettyJson("<img src=x onerror=alert(1)>")).toBeNull();
    expect(prettyJson("hello")).toBeNull();
  });

  it("says how long ago a change was", () => {
    const now = Date.parse("2026-01-01T12:00:00Z");
    expect(ago("2026-01-01T11:59:30Z", now)).toBe("30s ago");
    expect(ago("2026-01-01T11:00:00Z", now)).toBe("1 h ago");
    expect(ago(null, now)).toBe("—");
  });

  it("says how long until a token expires, and when it has", () => {
    const now = Date.parse("2026-01-01T12:00:00Z");
    expect(until("2026-01-01T12:59:30Z", now)).toBe("in 59 min");
    expect(until("2026-01-01T15:00:00Z", now)).toBe("in 3 h");
    expect(until("2026-01-01T11:59:59Z", now)).toBe("expired");
    expect(until(null, now)).toBe("—");
  });
});
