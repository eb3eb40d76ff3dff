"""Running pods judged for their next container start as the kubelet will make it, against
the real stack (``tests/restartcorpus.py``): the pod started on the real runtime, the node
changed, the agent published the kubelet's checkpoint as the kubelet's own code wrote it,
and the restart of the same cached answer on the real runtime and CDI library decides."""

from __future__ import annotations

from collections import Counter

import pytest

from tests import restartcorpus as rc
from webhook.engine import Outcome
from webhook.files.policyfile import default_policy


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    policy = default_policy()
    root = tmp_path_factory.mktemp("restarts")
    n = len(rc.STARTS) * len(rc.CHANGES) + 24
    done = [rc.run_case(c, root / str(i), policy) for i, c in enumerate(rc.cases(n))]
    judged = [c for c in done if c.answer is not None and c.verdict is not None]
    print("\n" + rc.table(judged))
    # the real programs judged most restarts (the rules stand in only where they cannot run)
    by = Counter(c.verdict.by for c in judged)
    print(dict(by))
    assert sum(n for b, n in by.items() if not b.startswith("rule")) > len(judged) // 2
    return judged


def _show(c: rc.Case) -> str:
    assert c.answer is not None and c.verdict is not None
    return (f"{c.name}: gpupool {c.answer.outcome.value} ({c.answer.message}); restart "
            f"{'runs' if c.runs else 'fails'} by {c.verdict.by}: {c.verdict.error[-300:]}")


def test_no_running_pod_missed_and_no_false_alarm(corpus):
    missed = [_show(c) for c in corpus if c.answer.outcome is Outcome.FINE and not c.runs]
    false = [_show(c) for c in corpus
             if c.answer.outcome is Outcome.FAILS_ON_RESTART and c.runs]
    assert not missed, "\n".join(missed)
    assert not false, "\n".join(false)


def test_what_the_kubelet_holds_decides_every_pod_and_doubt_says_why(corpus):
    """With the checkpoint read, every answer is decided; without it, a pod whose GPUs no
    record names is doubt, naming what is missing, and HAMi's record decides only where
    both of its plugin's ways agree."""
    for c in corpus:
        if c.agent_reads_checkpoint:
            assert c.answer.outcome in (Outcome.FINE, Outcome.FAILS_ON_RESTART), _show(c)
            assert "kubelet cached it" in c.answer.message, _show(c)
        elif not c.hami:
            assert c.answer.outcome is Outcome.MAY_FAIL_ON_RESTART, _show(c)
            assert "held-devices" in c.answer.message, _show(c)
        elif c.answer.outcome is Outcome.MAY_FAIL_ON_RESTART:
            assert "handed as" in c.answer.message, _show(c)


def test_failures_name_what_the_runtime_refuses(corpus):
    for c in corpus:
        if c.answer.outcome is not Outcome.FAILS_ON_RESTART:
            continue
        if c.answer.reason == "CDIDeviceMissing":
            # the real programs name the CDI device; the just-in-time rule, the GPU
            real = not c.verdict.by.startswith("rule")
            assert c.answer.missing and all(
                (m if real else m.partition("=")[2]) in c.verdict.error
                for m in c.answer.missing), _show(c)
        if c.answer.reason == "RuntimeHandlerMissing":
            assert "no runtime for" in c.verdict.error, _show(c)


def test_every_class_is_in_the_corpus_both_ways(corpus):
    """Each class of change fails some running pods, gpupool naming them, and leaves others
    running; changes that break nothing break nothing."""
    for klass in ("1", "2", "4", "5", "6", "7"):
        hit = [c for c in corpus if c.klass == klass]
        assert any(c.answer.outcome is Outcome.FAILS_ON_RESTART for c in hit), klass
        assert any(c.answer.outcome is Outcome.FINE for c in hit), klass
    for klass in ("3", "neutral"):
        hit = [c for c in corpus if c.klass == klass and c.agent_reads_checkpoint]
        assert hit and all(c.runs and c.answer.outcome is Outcome.FINE for c in hit), klass
    # a MIG device re-laid out under its pod: gone from the node, named
    relaid = [c for c in corpus if c.start.migs and "MIG-re-laid-out" in c.name
              and c.agent_reads_checkpoint]
    assert relaid and all(not c.runs and c.answer.outcome is Outcome.FAILS_ON_RESTART
                          for c in relaid)
    # a RuntimeClass whose handler is gone, and runc left as the default: both fail
    assert any(c.answer.reason == "RuntimeHandlerMissing" for c in corpus)
    assert any(c.klass == "5" and c.answer.reason == "GPUNotDelivered" for c in corpus)
    # a container's own NVIDIA_VISIBLE_DEVICES beside a plugin's CDI names (issue 64, item
    # 2): where containerd resolves the names it decides nothing, where containerd's CDI is
    # off and the names reach nobody it is all the container gets; both ways in the corpus
    for cdi_on in (True, False):
        hit = [c for c in corpus if c.own_env is not None and c.start.strategy != "envvar"
               and c.after.containerd_cdi is cdi_on and c.agent_reads_checkpoint]
        assert any(c.runs and c.answer.outcome is Outcome.FINE for c in hit), cdi_on
        assert any(not c.runs and c.answer.outcome is Outcome.FAILS_ON_RESTART
                   for c in hit), cdi_on
    # the seed's story after the fact: every envvar pod a CDI upgrade breaks is named
    seed = [c for c in corpus if c.klass == "1" and not c.runs]
    assert seed and all(c.answer.outcome is not Outcome.FINE for c in seed)


@pytest.mark.parametrize("config", rc.CONFIGURATIONS, ids=lambda c: c.name)
def test_every_supported_configuration_holds_the_same_promise(tmp_path, config):
    """Each agent option a user may choose, forced on every case: zero missed and zero
    false alarms there too, each restart judged by the real stack. What the agent cannot
    read then is doubt that says so, never Fine."""
    policy = default_policy()
    n = len(rc.STARTS) * len(rc.CHANGES)
    done = [rc.run_case(c, tmp_path / str(i), policy, config)
            for i, c in enumerate(rc.cases(n))]
    judged = [c for c in done if c.answer is not None and c.verdict is not None]
    print(f"\nrestart corpus, {config.name}\n" + rc.table(judged))
    missed = [_show(c) for c in judged if c.answer.outcome is Outcome.FINE and not c.runs]
    false = [_show(c) for c in judged
             if c.answer.outcome is Outcome.FAILS_ON_RESTART and c.runs]
    assert not missed, "\n".join(missed)
    assert not false, "\n".join(false)
    outcomes = Counter(c.answer.outcome for c in judged)
    if config.kubelet_checkpoint is False:
        # nothing says what a non-HAMi pod holds: doubt, naming what is missing
        assert all(c.answer.outcome is Outcome.MAY_FAIL_ON_RESTART
                   for c in judged if not c.hami), outcomes
    else:
        assert outcomes[Outcome.FINE] and outcomes[Outcome.FAILS_ON_RESTART], outcomes
