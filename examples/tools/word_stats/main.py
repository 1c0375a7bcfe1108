import json
import re
import sys
from collections import Counter

args = json.load(sys.stdin)
text = args["text"]
top = args.get("top", 5)
words = re.findall(r"[\w'-]+", text.lower())
sentences = [s for s in re.split(r"[.!?]+", text) if s.strip()]
counts = Counter(w for w in words if len(w) > 3)
print(
    json.dumps(
        {
            "characters": len(text),
            "words": len(words),
            "sentences": len(sentences),
            "lines": len(text.splitlines()) if text else 0,
            "reading_minutes": round(len(words) / 230, 1),
            "top_words": [{"word": w, "count": c} for w, c in counts.most_common(top)],
        }
    )
)
