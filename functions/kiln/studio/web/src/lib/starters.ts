export const STARTERS = {
  python: `import json
import sys

args = json.load(sys.stdin)
print(json.dumps({"echo": args}))
`,
  node: `const fs = require("node:fs");

const args = JSON.parse(fs.readFileSync(0, "utf8"));
console.log(JSON.stringify({ echo: args }));
`,
} as const;
