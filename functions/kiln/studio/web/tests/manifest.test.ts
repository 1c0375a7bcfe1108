import { describe, expect, it } from "vitest";
import { draftOf, type Tool } from "../src/lib/api";
import { MANIFEST_FIELDS, TASK_MODES } from "../src/lib/manifest";

// A tool as GET /api/tools/{name} answers it, a value in every field.
const tool: Tool = {
  id: "t1",
  name: "slow_report",
  enabled: false,
  revision: 4,
  bundle_id: null,
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-02T00:00:00Z",
  title: "Slow report",
  description: "Builds a report.",
  language: "python",
  code: "print(1)\n",
  requirements: ["requests>=2"],
  input_schema: { type: "object", properties: { b: { type: "string" }, a: { type: "integer" } } },
  output_schema: { type: "object" },
  annotations: { readOnlyHint: true },
  timeout_seconds: 120,
  secrets: ["TOKEN"],
  files: { "rates.json": "e30=" },
  task: "optional",
  tags: ["finance", "uk"],
  calls: ["fx_rate"],
  connections: [{ provider: "github", scopes: ["repo"] }],
};

describe("the draft a save sends", () => {
  it("holds exactly the manifest fields", () => {
    expect(Object.keys(draftOf(tool, tool.name)).sort()).toEqual([...MANIFEST_FIELDS].sort());
  });

  it("carries every value of the tool it came from", () => {
    const draft = draftOf(tool, tool.name) as unknown as Record<string, unknown>;
    const source = tool as unknown as Record<string, unknown>;
    for (const field of MANIFEST_FIELDS) expect(draft[field], field).toEqual(source[field]);
  });

  it("keeps the author's property order", () => {
    const draft = draftOf(tool, tool.name);
    expect(Object.keys(draft.input_schema["properties"] as object)).toEqual(["b", "a"]);
  });

  it("carries every task mode and the author's tag order", () => {
    for (const [mode] of TASK_MODES) expect(draftOf({ ...tool, task: mode }, tool.name).task).toBe(mode);
    expect(draftOf({ ...tool, tags: ["uk", "finance"] }, tool.name).tags).toEqual(["uk", "finance"]);
  });
});
