// CodeMirror 6 set up once for the studio: a language per tool, diagnostics from the server's
// syntax check, and a change callback.
import { basicSetup } from "codemirror";
import { Compartment, EditorState, type Extension } from "@codemirror/state";
import { EditorView, keymap } from "@codemirror/view";
import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";
import { json } from "@codemirror/lang-json";
import { setDiagnostics, lintGutter } from "@codemirror/lint";
import { MergeView } from "@codemirror/merge";
import { HighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { tags as t } from "@lezer/highlight";

// CodeMirror's default colours fail WCAG AA contrast on white; these pass (>= 4.5:1).
const highlight = syntaxHighlighting(
  HighlightStyle.define([
    { tag: [t.keyword, t.operatorKeyword, t.modifier], color: "#7a1fa2" },
    { tag: [t.string, t.special(t.string), t.regexp], color: "#a3330b" },
    { tag: [t.number, t.bool, t.null, t.atom], color: "#1a5c99" },
    { tag: [t.comment, t.lineComment, t.blockComment], color: "#5f6b5f", fontStyle: "italic" },
    { tag: [t.definition(t.variableName), t.function(t.variableName)], color: "#0b5c4a" },
    { tag: [t.propertyName], color: "#5a3e00" },
    { tag: [t.typeName, t.className], color: "#005f73" },
    { tag: t.invalid, color: "#b3261e" },
  ]),
);

// CodeMirror injects its styles with a <style> element; the page's CSP admits it only with
// the per-response nonce the server writes into this meta tag (scripts never need one).
const nonce = document.querySelector<HTMLMetaElement>('meta[name="csp-nonce"]')?.content ?? "";
const cspNonce = EditorView.cspNonce.of(nonce);

export type EditorLanguage = "python" | "node" | "json" | "text";

function languageOf(language: EditorLanguage): Extension {
  if (language === "python") return python();
  if (language === "node") return javascript();
  if (language === "json") return json();
  return [];
}

const theme = EditorView.theme({
  "&": { fontSize: "13.5px", height: "100%" },
  ".cm-scroller": { fontFamily: "var(--mono)", lineHeight: "1.55" },
  ".cm-content": { padding: "10px 0" },
  ".cm-gutters": { background: "var(--panel-2)", borderRight: "1px solid var(--line)" },
});

export interface CodeEditor {
  view: EditorView;
  setText(text: string): void;
  setLanguage(language: EditorLanguage): void;
  showProblem(problem: { line: number; column: number; message: string } | null): void;
  destroy(): void;
}

export function createEditor(
  parent: HTMLElement,
  text: string,
  language: EditorLanguage,
  onChange: (text: string) => void,
  options: { label: string; readOnly?: boolean } = { label: "Code" },
): CodeEditor {
  const lang = new Compartment();
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: text,
      extensions: [
        basicSetup,
        highlight,
        cspNonce,
        keymap.of([indentWithTab]),
        lang.of(languageOf(language)),
        lintGutter(),
        theme,
        EditorState.readOnly.of(Boolean(options.readOnly)),
        EditorView.contentAttributes.of({ "aria-label": options.label, tabindex: "0" }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    view,
    setText(next: string) {
      if (next === view.state.doc.toString()) return;
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: next } });
    },
    setLanguage(next: EditorLanguage) {
      view.dispatch({ effects: lang.reconfigure(languageOf(next)) });
    },
    showProblem(problem) {
      if (!problem) {
        view.dispatch(setDiagnostics(view.state, []));
        return;
      }
      const doc = view.state.doc;
      const lineNo = Math.min(Math.max(problem.line, 1), doc.lines);
      const line = doc.line(lineNo);
      const from = Math.min(line.from + Math.max(problem.column - 1, 0), line.to);
      const to = Math.min(from + 1, line.to) > from ? Math.min(from + 1, line.to) : line.to;
      view.dispatch(
        setDiagnostics(view.state, [{ from, to, severity: "error", message: problem.message }]),
      );
    },
    destroy() {
      view.destroy();
    },
  };
}

/** A read-only side-by-side diff of two texts. */
export function createDiff(
  parent: HTMLElement,
  left: string,
  right: string,
  language: EditorLanguage,
): { destroy(): void } {
  const shared = (label: string) => [
    basicSetup,
    highlight,
    cspNonce,
    languageOf(language),
    theme,
    EditorState.readOnly.of(true),
    EditorView.editable.of(false),
    EditorView.contentAttributes.of({ "aria-label": label, tabindex: "0" }),
  ];
  const merge = new MergeView({
    parent,
    a: { doc: left, extensions: shared("Older") },
    b: { doc: right, extensions: shared("Newer") },
    collapseUnchanged: { margin: 3, minSize: 6 },
    gutter: true,
    highlightChanges: true,
  });
  return { destroy: () => merge.destroy() };
}
