"""The three tools of the code-mode benchmark, as a real API would shape their answers.

`lookup_invoice` answers a billing record of the kind invoicing APIs return (customer with
address and tax ids, line items with prices, periods and tax, totals in minor units, payment
and status history, links): a few KB of JSON, most of it beside the point of a given question.
`fx_rate` answers a rate with its provenance; `format_money` answers a plain string. Each is
deterministic (code mode reruns the model's code after each round of calls, with every answer
so far). `write_folders` saves them as tool folders for `kiln dev --tools`, with two views of
the same tools: `billing` in `list` mode and `coder` in `code` mode (the three, and optionally
bench/discovery's generated tools beside them: a large view, where code mode is meant to pay).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.discovery.catalog import generate

SAFE = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}

LOOKUP_INVOICE = r"""
import json, sys

args = json.load(sys.stdin)
invoice_id = args["invoice_id"]
products = [
    ("Team plan seat", "prod_team_seat", 4_900, 12),
    ("Build minutes (per 1,000)", "prod_build_min", 350, 40),
    ("Artifact storage (per GB-month)", "prod_storage", 12, 850),
    ("Priority support", "prod_support_pri", 45_000, 1),
    ("SSO add-on", "prod_sso", 15_000, 1),
    ("Audit log retention, 1 year", "prod_audit", 9_900, 1),
    ("Egress (per GB)", "prod_egress", 8, 2_400),
    ("Dedicated runner, 4 vCPU", "prod_runner_4", 32_000, 2),
    ("Onboarding workshop", "prod_workshop", 120_000, 1),
]
items, subtotal = [], 0
for i in range(len(products)):
    name, product, unit, qty = products[i % len(products)]
    amount = unit * qty
    subtotal += amount
    items.append({
        "id": f"il_1Q{i:02d}XkLm8sVbGn{i:03d}",
        "object": "line_item",
        "description": f"{qty} x {name} (at \u00a3{unit / 100:,.2f} / unit)",
        "quantity": qty,
        "unit_amount": unit,
        "amount": amount,
        "currency": "gbp",
        "discountable": True,
        "period": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-30T23:59:59Z"},
        "price": {"id": f"price_{product}_gbp_m", "product": product, "nickname": name,
                  "recurring": {"interval": "month", "interval_count": 1},
                  "tax_behavior": "exclusive", "type": "recurring"},
        "tax_amounts": [{"amount": amount // 5, "inclusive": False,
                         "tax_rate": "txr_uk_vat_standard", "taxable_amount": amount}],
        "proration": False,
        "metadata": {"cost_centre": "ENG-PLATFORM", "po_line": str(10 * (i + 1))},
    })
tax = subtotal // 5
total = subtotal + tax
paid = total // 4
print(json.dumps({
    "id": invoice_id,
    "object": "invoice",
    "number": "KLN-2026-0412",
    "status": "open",
    "currency": "gbp",
    "created": "2026-12-01T09:12:44Z",
    "due_date": "2026-12-31",
    "period_start": "2026-11-01T00:00:00Z",
    "period_end": "2026-11-30T23:59:59Z",
    "collection_method": "send_invoice",
    "payment_terms": "Net 30",
    "customer": {
        "id": "cus_R2x9LmQa7Tn4", "name": "Harrow & Finch Analytics Ltd",
        "email": "accounts.payable@harrowfinch.co.uk", "phone": "+44 20 7946 0321",
        "address": {"line1": "14 Clerkenwell Close", "line2": "Floor 3",
                    "city": "London", "postal_code": "EC1R 0AA", "country": "GB"},
        "tax_ids": [{"type": "gb_vat", "value": "GB 123 4567 89"}],
        "preferred_locales": ["en-GB"],
    },
    "lines": {"object": "list", "total_count": len(items), "has_more": False, "data": items},
    "subtotal": subtotal,
    "tax": tax,
    "total": total,
    "amount_paid": paid,
    "amount_due": total - paid,
    "amount_remaining": total - paid,
    "default_tax_rates": [{"id": "txr_uk_vat_standard", "display_name": "VAT",
                           "percentage": 20.0, "jurisdiction": "GB", "inclusive": False}],
    "discounts": [],
    "payments": [{"id": "py_3Pz81KmQ", "amount": paid, "method": "bacs_debit",
                  "paid_at": "2026-12-03T14:02:10Z"}],
    "status_transitions": {"finalized_at": "2026-12-01T09:15:02Z", "paid_at": None,
                           "voided_at": None, "marked_uncollectible_at": None},
    "hosted_invoice_url": f"https://pay.example.com/i/acct_1Kiln/{invoice_id}",
    "invoice_pdf": f"https://pay.example.com/i/acct_1Kiln/{invoice_id}/pdf",
    "footer": "Harrow & Finch Analytics Ltd is billed under the Kiln Team agreement of "
              "2025-03-14. Bank transfers: Kiln Ltd, sort code 20-00-00, account 55779911.",
    "metadata": {"purchase_order": "PO-88213", "account_manager": "r.okafor"},
}))
"""

FX_RATE = r"""
import json, sys

args = json.load(sys.stdin)
mids = {"GBP": 1.2684, "EUR": 1.0841, "JPY": 0.006691, "CHF": 1.1302, "USD": 1.0}
base, quote = args["from"], args.get("to", "USD")
rate = round(mids[base] / mids[quote], 6)
print(json.dumps({
    "base": base, "quote": quote, "rate": rate, "inverse": round(1 / rate, 6),
    "bid": round(rate * 0.9995, 6), "ask": round(rate * 1.0005, 6),
    "as_of": "2026-12-04T11:00:00Z", "valid_until": "2026-12-04T12:00:00Z",
    "source": {"name": "ECB euro foreign exchange reference rates", "kind": "reference",
               "url": "https://data.ecb.europa.eu/"},
    "notice": "Indicative mid-market rate; not an offer to trade.",
}))
"""

FORMAT_MONEY = r"""
import json, sys

args = json.load(sys.stdin)
amount, currency = float(args["amount"]), args["currency"]
locale = args.get("locale", "en_US")
symbols = {"USD": "$", "GBP": "\u00a3", "EUR": "\u20ac", "JPY": "\u00a5", "CHF": "CHF\u00a0"}
group, point, after = {"en_US": (",", ".", False), "en_GB": (",", ".", False),
                       "de_DE": (".", ",", True), "fr_FR": ("\u202f", ",", True)}[locale]
digits = 0 if currency == "JPY" else 2
whole, _, cents = f"{abs(amount):,.{digits}f}".partition(".")
text = whole.replace(",", group) + (point + cents if digits else "")
sign = "-" if amount < 0 else ""
symbol = symbols.get(currency, currency + "\u00a0")
print(f"{sign}{text}\u00a0{symbol.strip()}" if after else f"{sign}{symbol}{text}")
"""

_STR = {"type": "string"}
_INT = {"type": "integer"}

TOOLS: dict[str, tuple[dict[str, Any], str]] = {
    "lookup_invoice": (
        {
            "title": "Look up an invoice",
            "description": "Fetch one invoice from the billing system by its id, with its "
            "customer, line items, tax, payments and totals. Amounts are integers in the "
            "currency's minor unit (pence, cents); `currency` is a lowercase ISO 4217 code.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "invoice_id": {
                        **_STR,
                        "pattern": "^in_[A-Za-z0-9]{6,40}$",
                        "description": "The invoice's id, e.g. in_1QdX93Lk",
                    },
                },
                "required": ["invoice_id"],
            },
            "output_schema": {
                "type": "object",
                "properties": {
                    "id": _STR,
                    "number": _STR,
                    "status": _STR,
                    "currency": _STR,
                    "customer": {"type": "object"},
                    "lines": {"type": "object"},
                    "subtotal": _INT,
                    "tax": _INT,
                    "total": _INT,
                    "amount_paid": _INT,
                    "amount_due": _INT,
                    "due_date": _STR,
                },
                "required": ["id", "number", "status", "currency", "total", "amount_due"],
            },
            "annotations": SAFE,
        },
        LOOKUP_INVOICE,
    ),
    "fx_rate": (
        {
            "title": "Exchange rate",
            "description": "The current mid-market exchange rate from one currency to "
            "another (ISO 4217 codes), with bid, ask, its time and its source. `rate` "
            "converts an amount in `from` to `to` by multiplying.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "from": {
                        **_STR,
                        "enum": ["GBP", "EUR", "JPY", "CHF", "USD"],
                        "description": "Currency to convert from",
                    },
                    "to": {
                        **_STR,
                        "enum": ["GBP", "EUR", "JPY", "CHF", "USD"],
                        "default": "USD",
                        "description": "Currency to convert to",
                    },
                },
                "required": ["from"],
            },
            "output_schema": {
                "type": "object",
                "properties": {
                    "base": _STR,
                    "quote": _STR,
                    "rate": {"type": "number"},
                    "as_of": _STR,
                },
                "required": ["base", "quote", "rate", "as_of"],
            },
            "annotations": SAFE,
        },
        FX_RATE,
    ),
    "format_money": (
        {
            "title": "Format money",
            "description": "Write an amount of money as a reader of a locale expects it, "
            "with the currency's symbol, digit grouping and decimals. Returns the text.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "description": "The amount, in major units"},
                    "currency": {**_STR, "description": "ISO 4217 code, e.g. USD"},
                    "locale": {
                        **_STR,
                        "enum": ["en_US", "en_GB", "de_DE", "fr_FR"],
                        "default": "en_US",
                    },
                },
                "required": ["amount", "currency"],
            },
            "annotations": SAFE,
        },
        FORMAT_MONEY,
    ),
}

TAG = "codebench"
VIEW = {"tools": [f"tag:{TAG}"], "published": True, "anonymous": True}


def write_folders(root: Path, more: int = 0) -> None:
    """The tools' folders and the two views, for `kiln dev --tools root`; `more` adds that
    many of bench/discovery's generated tools (bar any of the same name) to both views."""
    for name, (manifest, source) in TOOLS.items():
        folder = root / name
        folder.mkdir(parents=True)
        tool = {**manifest, "tags": [TAG], "timeout_seconds": 10}
        (folder / "tool.json").write_text(json.dumps(tool))
        (folder / "main.py").write_text(source.lstrip())
    for spec in [t for t in generate(more + len(TOOLS)) if t["name"] not in TOOLS][:more]:
        folder = root / spec["name"]
        folder.mkdir(parents=True)
        manifest = {k: v for k, v in spec.items() if k not in ("name", "inputSchema")}
        manifest |= {"input_schema": spec["inputSchema"], "tags": [*spec["tags"], TAG]}
        (folder / "tool.json").write_text(json.dumps(manifest))
        (folder / "main.py").write_text("import sys\nprint(sys.stdin.read())\n")
    (root / "billing.view.json").write_text(json.dumps({**VIEW, "mode": "list"}))
    (root / "coder.view.json").write_text(json.dumps({**VIEW, "mode": "code"}))
