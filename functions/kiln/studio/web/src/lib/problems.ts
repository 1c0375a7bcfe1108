// A save rule's violation in plain words for the field it belongs to: the message without
// the field's path (the field is right there) and without the rule's name or any regular
// expression, which go to a details view for whoever wants them.
import { ApiError, type Violation } from "./api";

export interface PlainProblem {
  text: string;
  detail: string; // the rule, and the regular expression when the message held one
}

const RULE = /\s*\(rule: ([^)]*)\)\.?\s*$/;
const REGEX = /\s*\((\^.*?\$)\)/; // the rules write a pattern as (^...$)

export function plain(problem: Violation): PlainProblem {
  let text = problem.message.replace(RULE, "");
  const details = [`rule: ${problem.rule}`];
  const regex = text.match(REGEX);
  if (regex) {
    text = text.replace(regex[0], "");
    details.push(`pattern: ${regex[1]}`);
  }
  const path = problem.field;
  if (path && text.startsWith(`${path} `)) text = text.slice(path.length + 1);
  text = text.trim().replace(/[.;:,]+$/, "");
  const item = path.match(/\[(\d+)\]$/); // one line of a list field
  text = item ? `Line ${Number(item[1]) + 1}: ${text}.` : text.charAt(0).toUpperCase() + text.slice(1) + ".";
  return { text, detail: details.join("; ") };
}

/** The problems of one field: its own path, or any path inside it. */
export function at(problems: Violation[], field: string): Violation[] {
  return problems.filter(
    (v) => v.field === field || v.field.startsWith(`${field}.`) || v.field.startsWith(`${field}[`),
  );
}

/** What a refused request says, as violations: a tool's, a view's `problems`, or the message. */
export function problemsOf(error: unknown): Violation[] {
  if (!(error instanceof ApiError)) return [{ field: "", rule: "error", message: String(error) }];
  if (error.violations.length) return error.violations;
  const listed = error.body["problems"];
  if (Array.isArray(listed))
    return listed.map((p: { field: string; message: string }) => ({ field: p.field, rule: error.code, message: p.message }));
  return [{ field: "", rule: error.code, message: error.message }];
}
