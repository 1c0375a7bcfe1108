// Reapplying an author's change on top of someone else's save: field by field, the side that
// changed a field wins; when both changed it, text (the code) is merged line by line and any
// overlap is left as conflict markers for the author to settle before saving again.
import { merge as diff3 } from "node-diff3";
import { clone, type Draft } from "./api";
import { MANIFEST_FIELDS } from "./manifest";

export interface MergeOutcome {
  draft: Draft;
  conflicts: string[]; // fields both sides changed differently
}

// Every manifest field but the name (a rename is its own action, never part of a save).
const FIELDS: (keyof Draft)[] = MANIFEST_FIELDS.filter((field) => field !== "name");

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function changedFields(base: Draft, other: Draft): (keyof Draft)[] {
  return FIELDS.filter((field) => !same(base[field], other[field]));
}

export function mergeText(base: string, theirs: string, mine: string): { text: string; clean: boolean } {
  const result = diff3(mine.split("\n"), base.split("\n"), theirs.split("\n"), {
    label: { a: "yours", o: "start", b: "theirs" },
  });
  return { text: result.result.join("\n"), clean: !result.conflict };
}

export function reapply(base: Draft, theirs: Draft, mine: Draft): MergeOutcome {
  const draft = clone(theirs);
  const conflicts: string[] = [];
  const record = draft as unknown as Record<string, unknown>;
  for (const field of changedFields(base, mine)) {
    if (same(theirs[field], base[field]) || same(theirs[field], mine[field])) {
      record[field] = clone(mine[field]);
    } else if (field === "code") {
      const merged = mergeText(base.code, theirs.code, mine.code);
      draft.code = merged.text;
      if (!merged.clean) conflicts.push(field);
    } else {
      record[field] = clone(mine[field]);
      conflicts.push(field);
    }
  }
  return { draft, conflicts };
}
