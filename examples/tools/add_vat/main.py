import json
import sys
from decimal import ROUND_HALF_UP, Decimal

args = json.load(sys.stdin)
net = Decimal(str(args["net"]))
rate = Decimal(str(args.get("rate", 20)))
vat = (net * rate / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
gross = net + vat
print(json.dumps({"net": str(net), "rate": str(rate), "vat": str(vat), "gross": str(gross)}))
