"""One error type that carries its answer, translated once per edge (STYLE.md, 12).

Every refusal Kiln raises is a `kiln.errors.KilnError` saying its HTTP status, REST code,
JSON-RPC code and data; the REST edge (`kiln.api.errors.rest_status_and_body`) and the MCP
edge (`kiln.protocol.errors.error_answer`) each read them in one place. No module keeps a
table from error classes to answers.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from kiln.api.errors import ApiError, rest_status_and_body
from kiln.aws.clients import StoreUnavailableError
from kiln.catalog.errors import CatalogBusyError, CatalogError, StaleRevisionError
from kiln.errors import REFUSED, UNAUTHORIZED, UNAVAILABLE, KilnError
from kiln.identity.policy import AuthError
from kiln.protocol.errors import MethodNotFoundError, TransportError, error_answer

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"


def _classes_saying_an_answer(package: Path) -> list[tuple[str, str]]:
    """(module, class) for each class that sets `status` or `rest_code` (in its body or as
    a class keyword)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            names = {
                name.id
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                for target in stmt.targets
                for name in ast.walk(target)
                if isinstance(name, ast.Name)
            }
            names |= {keyword.arg for keyword in node.keywords if keyword.arg}
            if names & {"status", "rest_code"}:
                found.append((module.removesuffix(".__init__"), node.name))
    return found


def error_tables(package: Path) -> list[str]:
    """Dict literals keyed by three or more `...Error` names: a table mapping errors."""
    tables = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Dict):
                keys = [k for k in node.keys if isinstance(k, ast.Name) and k.id.endswith("Error")]
                if len(keys) >= 3:
                    tables.append(f"{path.relative_to(package)}:{node.lineno}")
    return tables


def test_every_class_that_says_its_answer_is_a_kiln_error() -> None:
    classes = _classes_saying_an_answer(PACKAGE)
    assert len(classes) > 20  # the scan finds the refusals (catalog, keys, views, ...)
    wrong = [
        f"{module}.{name}"
        for module, name in classes
        if not issubclass(getattr(importlib.import_module(module), name), KilnError)
    ]
    assert wrong == [], "a class that says its HTTP answer must derive from KilnError"


def test_no_module_keeps_a_table_of_error_classes() -> None:
    assert error_tables(PACKAGE) == [], "say the answer on the error class instead"


def test_the_table_check_sees_a_table(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("T = {AError: 1, BError: 2, CError: 3}\n")
    assert error_tables(tmp_path) == ["m.py:1"]


def test_a_refusal_answers_rest_with_its_status_code_message_and_data() -> None:
    error = StaleRevisionError("tool 'x' is at revision 3, not 2", current=3)
    assert rest_status_and_body(error) == (
        412,
        {
            "error": {
                "code": "stale_revision",
                "message": "tool 'x' is at revision 3, not 2",
                "current_revision": 3,
            }
        },
    )


def test_a_subclass_answers_as_its_parent_until_it_says_otherwise() -> None:
    class NewCatalogRefusal(CatalogError):
        pass

    assert rest_status_and_body(NewCatalogRefusal("no")) == (
        400,
        {"error": {"code": "bad_request", "message": "no"}},
    )


def test_a_refusal_may_say_its_answer_where_its_class_is_named() -> None:
    class GoneError(CatalogError, status=410, rest_code="gone"):
        pass

    assert rest_status_and_body(GoneError("gone")) == (
        410,
        {"error": {"code": "gone", "message": "gone"}},
    )
    assert rest_status_and_body(CatalogError("no"))[0] == 400  # the parent keeps its own


def test_a_refusal_ends_an_mcp_request_with_its_jsonrpc_code_status_and_headers() -> None:
    busy = CatalogBusyError("busy; retry", retry_after_s=2)
    assert error_answer(busy) == (
        409,
        {"jsonrpc": "2.0", "id": None, "error": {"code": REFUSED, "message": "busy; retry"}},
        {"retry-after": "2"},
    )
    store = StoreUnavailableError("GetItem timed out")
    status, body, headers = error_answer(store)
    assert (status, body["error"]["code"], headers) == (503, UNAVAILABLE, {"retry-after": "1"})


def test_an_auth_refusal_says_unauthorized_on_mcp_and_its_status_code_on_rest() -> None:
    error = AuthError(403, 'Bearer error="insufficient_scope"', "this key may not author")
    assert rest_status_and_body(error) == (
        403,
        {"error": {"code": "forbidden", "message": "this key may not author"}},
    )
    status, body, headers = error_answer(error)
    assert status == 403
    assert body["error"] == {
        "code": UNAUTHORIZED,
        "message": "Unauthorized: this key may not author",
    }
    assert headers == {"www-authenticate": 'Bearer error="insufficient_scope"'}


def test_a_protocol_error_status_follows_its_era_unless_it_carries_its_own() -> None:
    error = MethodNotFoundError("Method not found: x", request_id=7)
    assert error_answer(error)[0] == 200
    error.modern = True
    assert error_answer(error)[0] == 404
    moved = TransportError("Not Acceptable", status=406, headers={"vary": "accept"})
    moved.modern = True
    assert error_answer(moved)[0] == 406
    assert error_answer(moved)[2] == {"vary": "accept"}


def test_an_api_error_carries_its_extra_members_into_the_rest_body() -> None:
    error = ApiError(413, "too_large", "the body is over 1 MB", limit_bytes=1048576)
    assert rest_status_and_body(error) == (
        413,
        {
            "error": {
                "code": "too_large",
                "message": "the body is over 1 MB",
                "limit_bytes": 1048576,
            }
        },
    )
