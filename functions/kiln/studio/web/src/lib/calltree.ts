import type { CallEntry } from "./api";

/** One row of the calls table: an entry, how deep it sits under the calls loaded with it,
 * the ids of the calls above it, how many inner calls it has here, and the id of its outer
 * call when that call is not loaded (an orphan). */
export interface CallRow {
  call: CallEntry;
  depth: number;
  above: string[];
  inner: number;
  orphanOf: string | null;
}

/** The loaded entries as a tree, flattened: outer calls in the order given (newest first),
 * each followed by its inner calls in time order, theirs under them. An entry whose outer
 * call is not loaded stays where it is, marked. */
export function callTree(calls: CallEntry[]): CallRow[] {
  const ids = new Set(calls.map((call) => call.id));
  const children = new Map<string, CallEntry[]>();
  for (const call of calls) {
    if (call.parent && ids.has(call.parent) && call.parent !== call.id) {
      const kin = children.get(call.parent) ?? [];
      kin.push(call);
      children.set(call.parent, kin);
    }
  }
  for (const kin of children.values()) kin.sort((a, b) => (a.at === b.at ? a.id.localeCompare(b.id) : a.at.localeCompare(b.at)));
  const rows: CallRow[] = [];
  const shown = new Set<string>();
  const walk = (call: CallEntry, above: string[], orphanOf: string | null) => {
    shown.add(call.id);
    const kin = (children.get(call.id) ?? []).filter((child) => !shown.has(child.id));
    rows.push({ call, depth: above.length, above, inner: kin.length, orphanOf });
    for (const child of kin) if (!shown.has(child.id)) walk(child, [...above, call.id], null);
  };
  for (const call of calls) {
    const outer = call.parent ?? null;
    if (!shown.has(call.id) && (outer === null || !ids.has(outer))) walk(call, [], outer);
  }
  for (const call of calls) if (!shown.has(call.id)) walk(call, [], null); // a cycle: shown, never lost
  return rows;
}
