import json
import sys

args = json.load(sys.stdin)
current = [args["document"]]
for part in args["path"].split("."):
    found = []
    for value in current:
        if part == "*":
            found.extend(value.values() if isinstance(value, dict) else value if isinstance(value, list) else [])
        elif isinstance(value, dict) and part in value:
            found.append(value[part])
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            found.append(value[int(part)])
    current = found
print(json.dumps({"path": args["path"], "matches": current}))
