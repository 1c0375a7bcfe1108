"""Access-control settings from the environment, with errors that name the variable."""

from __future__ import annotations

import pytest

from kiln.identity.settings import AuthSettings, AuthSettingsError, check_audience


def test_defaults_are_keys_only_and_not_anonymous() -> None:
    settings = AuthSettings.from_env({})
    assert not settings.oauth
    assert settings.authorization_servers == ()
    assert settings.secrets_prefix == "/kiln"
    assert (settings.scopes.call, settings.scopes.author) == ("kiln:call", "kiln:author")


def test_oauth_settings_are_read_and_the_issuer_is_kept_exactly() -> None:
    settings = AuthSettings.from_env(
        {
            "KILN_OAUTH_ISSUER": "https://tenant.auth0.example/",
            "KILN_PUBLIC_BASE_URL": "https://kiln.example/",
            "KILN_OAUTH_AUDIENCE": "api://kiln, https://kiln.example/mcp",
            "KILN_OAUTH_CALL_SCOPE": "tools.run",
        }
    )
    assert settings.oauth_issuer == "https://tenant.auth0.example/"
    assert settings.authorization_servers == ("https://tenant.auth0.example/",)
    assert settings.oauth_audiences == ("api://kiln", "https://kiln.example/mcp")
    assert settings.scopes.call == "tools.run"
    assert settings.scopes.author == "kiln:author"


def test_oauth_without_a_fixed_audience_is_refused() -> None:
    auth = AuthSettings.from_env({"KILN_OAUTH_ISSUER": "https://login.example"})
    with pytest.raises(AuthSettingsError, match="KILN_PUBLIC_BASE_URL or KILN_OAUTH_AUDIENCE"):
        check_audience(auth, None)
    check_audience(auth, "https://kiln.example")  # a fixed base URL is enough


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KILN_OAUTH_ISSUER": "login.example"}, "KILN_OAUTH_ISSUER must be an http"),
        ({"KILN_SECRETS_PREFIX": "kiln"}, "KILN_SECRETS_PREFIX must start with '/'"),
        ({"KILN_SECRETS_PREFIX": "/kiln/"}, "KILN_SECRETS_PREFIX must start with '/'"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(AuthSettingsError, match=message):
        AuthSettings.from_env(env)
