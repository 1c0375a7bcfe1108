import json
import sys

import humanize

args = json.load(sys.stdin)
binary = bool(args.get("binary", False))
formatted = [humanize.naturalsize(size, binary=binary) for size in args["sizes"]]
print(json.dumps({"formatted": formatted}))
