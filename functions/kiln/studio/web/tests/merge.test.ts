import { describe, expect, it } from "vitest";
import type { Draft } from "../src/lib/api";
import { reapply } from "../src/lib/merge";

function draft(overrides: Partial<Draft> = {}): Draft {
  return {
    name: "t",
    title: null,
    description: "d",
    language: "python",
    code: "a\nb\nc\nd\ne\n",
    requirements: [],
    input_schema: { type: "object", properties: {} },
    output_schema: null,
    annotations: null,
    timeout_seconds: 30,
    enabled: true,
    secrets: [],
    files: {},
    task: null,
    tags: [],
    calls: [],
    connections: [],
    ...overrides,
  };
}

describe("reapplying my change on top of theirs", () => {
  it("keeps both sides when they changed different fields", () => {
    const out = reapply(draft(), draft({ description: "theirs" }), draft({ timeout_seconds: 5 }));
    expect(out.conflicts).toEqual([]);
    expect(out.draft.description).toBe("theirs");
    expect(out.draft.timeout_seconds).toBe(5);
  });

  it("merges code lines both sides changed apart", () => {
    const out = reapply(draft(), draft({ code: "A\nb\nc\nd\ne\n" }), draft({ code: "a\nb\nc\nd\nE\n" }));
    expect(out.conflicts).toEqual([]);
    expect(out.draft.code).toBe("A\nb\nc\nd\nE\n");
  });

  it("marks overlapping code edits as a conflict with both versions shown", () => {
    const out = reapply(draft(), draft({ code: "a\nTHEIRS\nc\nd\ne\n" }), draft({ code: "a\nMINE\nc\nd\ne\n" }));
    expect(out.conflicts).toEqual(["code"]);
    expect(out.draft.code).toContain("MINE");
    expect(out.draft.code).toContain("THEIRS");
    expect(out.draft.code).toContain("<<<<<<<");
  });

  it("takes mine for a field both changed and names it", () => {
    const out = reapply(draft(), draft({ description: "theirs" }), draft({ description: "mine" }));
    expect(out.conflicts).toEqual(["description"]);
    expect(out.draft.description).toBe("mine");
  });
});

describe("tags and task support ride along", () => {
  it("keeps my tags and task mode on top of their code change", () => {
    const out = reapply(draft(), draft({ code: "x\n" }), draft({ tags: ["finance"], task: "optional" }));
    expect(out.conflicts).toEqual([]);
    expect(out.draft.tags).toEqual(["finance"]);
    expect(out.draft.task).toBe("optional");
    expect(out.draft.code).toBe("x\n");
  });
});
