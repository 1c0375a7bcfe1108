import json
import sys


def children(value, part):
    if part == "*":
        if isinstance(value, dict):
            return list(value.values())
        return list(value) if isinstance(value, list) else []
    if isinstance(value, dict):
        return [value[part]] if part in value else []
    if isinstance(value, list) and part.lstrip("-").isdigit():
        index = int(part)
        return [value[index]] if -len(value) <= index < len(value) else []
    return []


args = json.load(sys.stdin)
current = [args["document"]]
for part in args["path"].split("."):
    current = [found for value in current for found in children(value, part)]
print(json.dumps({"path": args["path"], "matches": current}))
