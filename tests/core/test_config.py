"""The security configuration: the TOML file, the A2A_BRIDGE_* variables, the command line on top, and the errors
that name what is wrong."""

import ipaddress
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from a2a_bridge.agents.catalog import DEPLOYER_TOKEN
from a2a_bridge.cli.main import kit_url, parser, security
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.config import DEMO_OPERATOR_TOKEN
from a2a_bridge.core.config import ConfigError, Limits, SecurityConfig, check_delegates, env_principals, load

FILE = """
require_auth = true

[[principal]]
name = "alice"
kind = "user"
token = "tok-alice"

[[principal]]
name = "planner"
kind = "agent"
token_env = "PLANNER_TOKEN"
acts_for = ["alice"]

[[principal]]
name = "ops"
kind = "operator"
token = "tok-ops"

[webhooks]
allow_networks = ["127.0.0.1/32", "fd00::/8"]

[limits]
max_body_bytes = 2048
max_streams = 3
"""


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_names_principals_networks_and_limits(tmp_path: Path) -> None:
    config = load(written(tmp_path, FILE), {"PLANNER_TOKEN": "tok-planner"})
    assert config.require_auth
    assert config.principals == {
        "tok-alice": Principal("alice"),
        "tok-planner": Principal("planner", kind="agent", acts_for=frozenset({"alice"})),
        "tok-ops": Principal("ops", kind="operator"),
    }
    assert config.webhook_networks == (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("fd00::/8"))
    assert config.limits == Limits(max_body_bytes=2048, max_streams=3)


def test_the_environment_adds_to_the_file_and_overrides_its_settings(tmp_path: Path) -> None:
    environ = {
        "A2A_BRIDGE_CONFIG": str(written(tmp_path, FILE)),
        "PLANNER_TOKEN": "tok-planner",
        "A2A_BRIDGE_REQUIRE_AUTH": "false",
        "A2A_BRIDGE_PRINCIPALS": "user:bob=tok-bob; agent:helper>alice+bob=tok-helper operator:night=tok=night=",
        "A2A_BRIDGE_ALLOW_WEBHOOK_NETWORKS": "10.0.0.0/8,192.168.1.7",
        "A2A_BRIDGE_MAX_PARTS": "5",
        "A2A_BRIDGE_MAX_BODY_BYTES": "4096",
    }
    config = load(None, environ)
    assert not config.require_auth
    assert config.principals["tok-bob"] == Principal("bob")
    assert config.principals["tok-helper"] == Principal("helper", kind="agent", acts_for=frozenset({"alice", "bob"}))
    assert config.principals["tok=night="] == Principal("night", kind="operator")
    assert "tok-alice" in config.principals
    assert ipaddress.ip_network("192.168.1.7/32") in config.webhook_networks
    assert config.limits == Limits(max_body_bytes=4096, max_parts=5, max_streams=3)


def test_without_file_or_variables_the_defaults_hold() -> None:
    assert load(None, {}) == SecurityConfig()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("require_auth = 1", "require_auth"),
        ("requires_auth = true", "unknown keys requires_auth"),
        ('[[principal]]\nname = "x"\nkind = "admin"\ntoken = "t"', "kind must be one of user, agent, operator"),
        ('[[principal]]\nname = "anonymous"\ntoken = "t"', "the name must be non-empty"),
        ('[[principal]]\nname = "alice"\ntoken = "t"\nacts_for = ["bob"]', "only an agent principal acts for people"),
        ('[[principal]]\nname = "a"\ntoken = "t"\n[[principal]]\nname = "b"\ntoken = "t"', "the same token is given twice"),
        ('[[principal]]\nname = "a"\ntoken = "has space"', "no whitespace"),
        ('[[principal]]\nname = "a"\ntoken_env = "UNSET_TOKEN_VARIABLE"', "UNSET_TOKEN_VARIABLE is not set"),
        ('[[principal]]\nname = "a"\ntoken = "t"\nrole = "x"', "unknown keys role"),
        ("[limits]\nmax_parts = 0", "max_parts must be a positive integer"),
        ("[limits]\nmax_parts = true", "max_parts must be a positive integer"),
        ("[limits]\nmax_things = 3", "unknown limit 'max_things'"),
        ('[webhooks]\nallow_networks = ["not-a-network"]', "'not-a-network' is not an address or a network"),
        ("[webhooks]\nallow_private = true", "[webhooks] takes allow_networks only"),
        ("this is = not toml =", "not valid TOML"),
        ('[[principal]]\nname = "a=b"\ntoken = "t"', "the name must not hold '='"),
        ('allowed_hosts = ["http://x.example/"]', "is not a host name, an address or host:port"),
        ("allowed_hosts = \"x.example\"", "allowed_hosts must be a list of host names"),
        ('public_url = "https://x.example:port"', "is not an http(s) URL with a host"),
    ],
)
def test_a_file_error_names_the_file_and_the_entry(tmp_path: Path, text: str, named: str) -> None:
    path = written(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(named)) as raised:
        load(path, {})
    assert str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("alice=tok", "expected KIND:NAME=TOKEN"),
        ("user:alice", "expected KIND:NAME=TOKEN"),
        ("root:alice=tok", "kind must be one of"),
        ("user:alice>bob=tok", "only an agent principal acts for people"),
        ("user:=tok", "the name must be non-empty"),
    ],
)
def test_a_principals_variable_error_names_the_entry(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=f"A2A_BRIDGE_PRINCIPALS entry 1: {named}"):
        env_principals(text)


def test_an_agent_acts_only_for_configured_users() -> None:
    config = SecurityConfig(principals={"t": Principal("planner", kind="agent", acts_for=frozenset({"zoe"}))})
    with pytest.raises(ConfigError, match="agent planner acts for zoe, who has no user token"):
        check_delegates(config)


def serve_args(*argv: str) -> SecurityConfig:
    return security(parser().parse_args(["serve", *argv]))


def test_the_command_line_adds_users_networks_and_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("A2A_BRIDGE_OPERATOR_TOKEN", raising=False)
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    demo = serve_args("--allow-webhook-network", "127.0.0.1/32")
    assert not demo.require_auth
    assert demo.principals == {DEMO_OPERATOR_TOKEN: Principal("operator", kind="operator")}
    assert demo.webhook_networks == (ipaddress.ip_network("127.0.0.1/32"),)
    named = serve_args("--user-token", "tok-a=alice")
    assert named.principals == {"tok-a": Principal("alice")}, "no demo operator token once a principal is configured"

    required = serve_args("--require-auth")
    assert required.require_auth and required.principals == {}, "no demo operator token once a token is required"
    chosen = serve_args("--require-auth", "--operator-token", "tok-ops")
    assert chosen.principals == {"tok-ops": Principal("operator", kind="operator")}
    monkeypatch.setenv("A2A_BRIDGE_OPERATOR_TOKEN", "tok-env-ops")
    assert serve_args().principals == {"tok-env-ops": Principal("operator", kind="operator")}


@pytest.mark.parametrize("entry", ["tok=anonymous", "tok=", "=alice", "no-equals", "tok with space=alice", "tok=\x07"])
def test_the_command_line_checks_user_names_as_the_file_does(entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "--user-token", entry])
    assert "--user-token" in capsys.readouterr().err


def test_a_user_token_splits_at_the_equals_sign_beside_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    assert serve_args("--user-token", "dG9rZW4==alice").principals == {"dG9rZW4=": Principal("alice")}
    assert env_principals("user:alice=dG9rZW4=") == {"dG9rZW4=": Principal("alice")}


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--user-token", "tok-1=ops", "--operator-token", "tok-2"], {"A2A_BRIDGE_PRINCIPALS": "operator:ops=tok-3"}),
        (["--user-token", "tok-1=operator", "--operator-token", "tok-2"], {}),
        ([], {"A2A_BRIDGE_PRINCIPALS": "user:bob=tok-1 agent:bob>bob=tok-2"}),
    ],
)
def test_a_name_given_to_two_kinds_is_refused(argv: list[str], environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match="is given to two kinds of principal"):
        serve_args(*argv)


def test_allowed_hosts_default_to_loopback_names_on_loopback_and_add_the_public_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    assert serve_args().allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert serve_args("--host", "0.0.0.0").allowed_hosts == (), "no default off loopback: every Host is answered"
    chosen = serve_args("--allowed-host", "Bridge.Example.com", "--public-url", "https://a2a.example.com:8443/base/")
    assert chosen.allowed_hosts == ("bridge.example.com", "a2a.example.com:8443")
    assert chosen.public_url == "https://a2a.example.com:8443/base"
    path = written(tmp_path, 'allowed_hosts = ["a.example"]\npublic_url = "https://b.example"')
    monkeypatch.setenv("A2A_BRIDGE_ALLOWED_HOSTS", "c.example:81, d.example")
    config = serve_args("--config", str(path))
    assert config.allowed_hosts == ("a.example", "c.example:81", "d.example", "b.example")
    assert config.public_url == "https://b.example"


@pytest.mark.parametrize(
    "argv", [["--allowed-host", "http://x.example"], ["--allowed-host", "x.example:port"], ["--public-url", "ftp://x"],
             ["--public-url", "https://user:pw@x.example"], ["--public-url", "https://x.example/?q=1"]],
)
def test_a_malformed_host_or_public_url_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", *argv])


def test_serve_stops_with_the_configuration_error(tmp_path: Path) -> None:
    path = written(tmp_path, '[[principal]]\nname = "x"\nkind = "admin"\ntoken = "t"')
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "serve", "--config", str(path), "--store", "memory"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert f"a2a-bridge serve: {path} principal 1: kind must be one of user, agent, operator" in proc.stderr


def test_the_kit_ports_name_the_kits_own_addresses() -> None:
    assert kit_url("127.0.0.1", 41243) == "http://localhost:41243"
    assert kit_url("::1", 41241) == "http://localhost:41241"
    assert kit_url("10.1.2.3", 9999) == "http://10.1.2.3:9999"
    assert kit_url("fd00::5", 9999) == "http://[fd00::5]:9999"


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--user-token", "tok=alice", "--user-token", "tok=bob"], {}),
        (["--user-token", "tok=alice", "--operator-token", "tok"], {}),
        (["--user-token", "tok=alice"], {"A2A_BRIDGE_OPERATOR_TOKEN": "tok"}),
        (["--user-token", "tok=bob"], {"A2A_BRIDGE_PRINCIPALS": "user:alice=tok"}),
        ([], {"A2A_BRIDGE_PRINCIPALS": "user:alice=tok user:bob=tok"}),
    ],
)
def test_a_token_given_to_two_principals_is_refused(
    argv: list[str], environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    monkeypatch.delenv("A2A_BRIDGE_OPERATOR_TOKEN", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match="one token is given to two principals"):
        serve_args(*argv)


def test_the_same_entry_given_twice_is_one_principal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    monkeypatch.delenv("A2A_BRIDGE_OPERATOR_TOKEN", raising=False)
    assert serve_args("--user-token", "tok=alice", "--user-token", "tok=alice").principals == {"tok": Principal("alice")}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--user-token", "tok=alice", "--user-token", "tok=bob"],
         "--user-token: one token is given to two principals (user alice, user bob)"),
        (["--user-token", "tok=alice", "--operator-token", "tok"],
         "the operator token: one token is given to two principals (user alice, operator operator)"),
        (["--user-token", f"{DEPLOYER_TOKEN}=alice", "--agent", "deployer"],
         "the token of user alice is also agent deployer's demo token for deployer-client"),
    ],
)
def test_serve_refuses_a_token_that_would_be_two_principals_with_one_line(argv: list[str], said: str) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("A2A_BRIDGE_CONFIG", "A2A_BRIDGE_OPERATOR_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "serve", "--store", "memory", "--port", "0", *argv],
        capture_output=True, text=True, timeout=60, env=environ,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"a2a-bridge serve: {said}; each principal needs a token of its own"
                                        if "demo token" not in said else
                                        f"a2a-bridge serve: {said}; choose another token (or --require-auth, under "
                                        "which demo tokens are not accepted)"]
