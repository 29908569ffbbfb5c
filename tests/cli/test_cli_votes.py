"""``anfitrion approvals`` and the two-person rule: a vote needs the reviewer's own token, the
same person votes once, and list/show say who has approved so far."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion._cli.main import cli
from anfitrion.channels import load_reviewers
from anfitrion.policy import parse_policy
from anfitrion.store import open_store
from anfitrion.testing import ScriptedModel, call

POLICY = ('[[rules]]\ntool = "deploy"\nverdict = "ask"\n'
          'quorum = { approvals = 2, roles = ["ops"] }\n')


def _new_token(runner: CliRunner, name: str) -> tuple[str, str]:
    made = runner.invoke(cli, ["approvals", "reviewer-token", name, "--role", "ops"])
    assert made.exit_code == 0, made.output
    token = made.stderr.split("(shown once): ")[1].strip()
    return token, made.stdout


@pytest.fixture
def deploy_request(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'votes.db'}"
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def deploy(service: str) -> str:
        """Deploy a service."""
        return "deployed"

    async def suspend() -> str:
        store = open_store(url)
        try:
            host = Host(model=ScriptedModel([call("deploy", {"service": "api"}), "ok"]),
                        tools=tools, store=store, approver=DeferredApprover(),
                        policy=parse_policy(POLICY))
            run = await host.run("deploy the api", principal="ci-agent")
            return run.pending[0].id
        finally:
            await store.close()

    return url, anyio.run(suspend)


def test_a_cli_vote_needs_the_reviewers_own_token_and_counts_once(
        deploy_request: tuple[str, str], tmp_path: Path) -> None:
    url, request_id = deploy_request
    runner = CliRunner()
    alice, alice_entry = _new_token(runner, "alice")
    _, bob_entry = _new_token(runner, "bob")
    reviewers = tmp_path / "reviewers.toml"
    reviewers.write_text(alice_entry + "\n" + bob_entry)
    assert len(load_reviewers(reviewers)) == 2

    bare = runner.invoke(cli, ["approvals", "approve", request_id, "--store", url, "--as", "alice"])
    assert bare.exit_code != 0 and "--reviewers" in bare.output

    env = {"ANFITRION_REVIEWER_TOKEN": alice}
    posing = runner.invoke(cli, ["approvals", "approve", request_id, "--store", url,
                                 "--reviewers", str(reviewers), "--as", "bob"], env=env)
    assert posing.exit_code != 0 and "alice's" in posing.output
    voted = runner.invoke(cli, ["approvals", "approve", request_id, "--store", url,
                                "--reviewers", str(reviewers)], env=env)
    assert voted.exit_code == 0, voted.output
    assert "voted to approve" in voted.output and "1 more approval(s) needed" in voted.output
    again = runner.invoke(cli, ["approvals", "approve", request_id, "--store", url,
                                "--reviewers", str(reviewers)], env=env)
    assert again.exit_code != 0 and "voted on this request already" in again.output

    shown = runner.invoke(cli, ["approvals", "show", request_id, "--store", url])
    assert "Votes: alice approved (via cli) — needs 2 distinct approvers holding ops, 1 more" \
        in shown.output
    listed = runner.invoke(cli, ["approvals", "list", "--store", url])
    assert "pending 1/2" in listed.output


def test_a_wrong_reviewer_token_is_refused_by_the_cli(
        deploy_request: tuple[str, str], tmp_path: Path) -> None:
    url, request_id = deploy_request
    runner = CliRunner()
    _, entry = _new_token(runner, "alice")
    reviewers = tmp_path / "reviewers.toml"
    reviewers.write_text(entry)
    wrong = runner.invoke(cli, ["approvals", "approve", request_id, "--store", url,
                                "--reviewers", str(reviewers)],
                          env={"ANFITRION_REVIEWER_TOKEN": "guessed-token-0123456789"})
    assert wrong.exit_code != 0 and "nobody's token" in wrong.output
