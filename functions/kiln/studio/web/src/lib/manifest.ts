// The fields of a tool's manifest as a save takes them: the one list the studio edits, keeps
// and compares. tests/functional/test_studio_manifest.py checks it against the server's
// `kiln.catalog.model.Draft`, so a field added there fails a test until the studio has it.
export const MANIFEST_FIELDS = [
  "name",
  "description",
  "language",
  "code",
  "requirements",
  "input_schema",
  "output_schema",
  "title",
  "annotations",
  "timeout_seconds",
  "enabled",
  "secrets",
  "files",
  "task",
  "tags",
  "calls",
  "connections",
] as const;

export type ManifestField = (typeof MANIFEST_FIELDS)[number];

/** How a tool may run as an MCP task: never (null), when the client asks, always, or after
 *  asking its questions inside the request. Every value the save rules take (`TaskMode` in
 *  kiln/catalog/model.py; tests/unit/studio/test_studio_manifest_fields.py compares them), so a
 *  saved tool's mode always shows and a save sends it back unchanged. */
export const TASK_MODES = [
  [null, "Never: every call answers in the request"],
  ["optional", "Optional: a client may ask for a task"],
  ["required", "Required: every call is a task"],
  ["ask_first", "Ask first: questions, then a task"],
] as const;

export type TaskMode = (typeof TASK_MODES)[number][0];
