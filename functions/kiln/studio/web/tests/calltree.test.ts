import { describe, expect, it } from "vitest";
import type { CallEntry } from "../src/lib/api";
import { callTree } from "../src/lib/calltree";

function entry(id: string, at: string, parent: string | null = null): CallEntry {
  return { id, at: `2027-01-15T08:00:${at}Z`, caller: "key:ci", tool: `t_${id}`, outcome: "ok", revision: 1,
           view: null, duration_ms: 1, output_bytes: 0, detail: null, parent };
}

describe("the calls table as a tree", () => {
  it("puts inner calls under their outer call in time order, theirs under them", () => {
    const page = [entry("late", "09"), entry("c", "05", "job"), entry("d", "04", "c"), entry("b", "03", "job"), entry("job", "02"), entry("old", "01")];
    const rows = callTree(page);
    expect(rows.map((r) => [r.call.id, r.depth, r.inner, r.orphanOf])).toEqual([
      ["late", 0, 0, null], ["job", 0, 2, null], ["b", 1, 0, null], ["c", 1, 1, null], ["d", 2, 0, null], ["old", 0, 0, null],
    ]);
    expect(rows.find((r) => r.call.id === "d")!.above).toEqual(["job", "c"]);
  });

  it("marks an inner call whose outer call is not loaded, and keeps its own inner calls under it", () => {
    const rows = callTree([entry("x", "05", "gone"), entry("y", "06", "x")]);
    expect(rows.map((r) => [r.call.id, r.depth, r.orphanOf])).toEqual([["x", 0, "gone"], ["y", 1, null]]);
  });

  it("shows every entry once even when parents form a cycle", () => {
    const rows = callTree([entry("a", "01", "b"), entry("b", "02", "a"), entry("s", "03", "s")]);
    expect(rows.map((r) => r.call.id).sort()).toEqual(["a", "b", "s"]);
  });
});
