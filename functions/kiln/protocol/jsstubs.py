"""Code mode in JavaScript: `execute(code, language="javascript")` runs the model's code in Node.

The same view's tools are functions in the code's scope, named as in Python (`codestubs`: a
name's `-` becomes `_`, and a name JavaScript reserves gets a trailing `_`), each taking its
arguments as one object and returning what `kiln_tools` returns: `fx_rate({from: "GBP"})`,
`tools.call(name, args)`, `tools.gather([[name, args], ...])`, `ToolCallError` when a tool
fails. The answer is what the code prints (`console.log`); an exception prints its name and
message on stderr and exits 1. The functions are made by the wrapper from `kiln_view.json`
(function name -> tool name): the model reads their arguments in `execute`'s description or
from `describe_tools`, never in this file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kiln.protocol.codestubs import unique_names

VIEW_FILE = "kiln_view.json"
# JavaScript's reserved words, and the names the wrapper puts in the code's scope besides.
_RESERVED = (
    "arguments await break case catch class const continue debugger default delete do else "
    "enum eval export extends false finally for function if implements import in instanceof "
    "interface let new null package private protected public return static super switch this "
    "throw true try typeof var void while with yield"
)
_SCOPE = "tools ToolCallError console require process module exports"
JS_TAKEN = frozenset(_RESERVED.split()) | frozenset(_SCOPE.split())

JS_WRAPPER = """\
'use strict';
// Kiln's execute in JavaScript: runs the model's code with the view's tools as functions.
const fs = require('node:fs');
const { tools, ToolCallError } = require('./kiln_tools');
const names = JSON.parse(fs.readFileSync(__dirname + '/kiln_view.json', 'utf8'));
const { code } = JSON.parse(fs.readFileSync(0, 'utf8'));
const scope = { tools, ToolCallError };
for (const [fn, tool] of Object.entries(names)) scope[fn] = (args) => tools.call(tool, args ?? {});
let run;
try {
  run = new Function(...Object.keys(scope), code);
} catch (error) {
  process.stderr.write(`${error.name}: ${error.message}\\n`);
  process.exit(1);
}
try {
  run(...Object.values(scope));
} catch (error) {
  const name = error instanceof ToolCallError ? 'ToolCallError' : (error && error.name) || 'Error';
  process.stderr.write(`${name}: ${error && error.message}\\n`);
  process.exit(1);
}
"""


def js_program(names: Sequence[str]) -> tuple[str, dict[str, bytes]]:
    """The JavaScript `execute`'s script and the file beside it, for a view's tool names."""
    functions = unique_names(names, JS_TAKEN)
    view = {function: name for name, function in sorted(functions.items())}
    return JS_WRAPPER, {VIEW_FILE: json.dumps(view, separators=(",", ":")).encode()}
