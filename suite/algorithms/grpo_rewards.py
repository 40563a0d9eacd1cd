"""Verifiable rewards for GRPO, as plug-ins: the spec's `grpo.reward` names a built-in or an import path.

A reward is a function `fn(completion: str, answer: str, **params) -> float` (the block's other keys are its
parameters): the decoded completion (up to and without its stop token) and the problem's reference answer.
Built-ins: exact_match (1.0 when the completion, stripped, equals the answer, else 0.0); gsm8k (veRL's
verl/utils/reward_score/gsm8k.py compute_score: the last '#### N' of the completion's last 300 characters, commas
and '$' removed, equal to the answer: `score`; another number: `format_score`; none: 0). `check` imports and binds
it at spec load, so a reward that does not import is a SpecError before anything starts; a reward that raises or
returns something other than a finite number mid-run is a `RewardError` naming the prompt index and the plug-in
(the run ends `error`, never `reached`).
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import Any

from suite import registry

RewardFn = Callable[[str, str], float]

REWARDS: dict[str, str] = {
    "exact_match": "suite.algorithms.grpo_rewards:exact_match",
    "gsm8k": "suite.algorithms.grpo_rewards:gsm8k",
}
_GSM8K_STRICT = re.compile("#### (\\-?[0-9\\.\\,]+)")
_GSM8K_FLEXIBLE = re.compile("(\\-?[0-9\\.\\,]+)")


class RewardError(ValueError):
    pass


def exact_match(completion: str, answer: str) -> float:
    return 1.0 if completion.strip() == answer.strip() else 0.0


def gsm8k(completion: str, answer: str, method: str = "strict", format_score: float = 0.0,
          score: float = 1.0) -> float:
    """veRL's GSM8K reward: strict takes the last '#### N' (the format the prompt asks for), flexible the last
    number; only the last 300 characters are searched, as veRL's (_SOLUTION_CLIP_CHARS)."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k reward: method {method!r} (strict or flexible)")
    text = completion[-300:]
    if method == "strict":
        found = _GSM8K_STRICT.findall(text)
        final = found[-1].replace(",", "").replace("$", "") if found else None
    else:
        found = _GSM8K_FLEXIBLE.findall(text)  # veRL's loop ends on the first when every one is "" or "."
        final = next((a for a in reversed(found) if a not in ("", ".")), found[0]) if found else None
    if final is None:
        return 0.0
    return float(score) if final == answer else float(format_score)


def split(block: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`exact_match` or `{name: pkg.mod:fn, param: ...}` -> (name, params)."""
    if isinstance(block, str):
        return block, {}
    params = dict(block)
    name = params.pop("name", None)
    if not isinstance(name, str):
        raise RewardError("grpo.reward: a block needs `name` (a built-in reward or an import path pkg.mod:fn)")
    return name, params


def build(block: str | dict[str, Any]) -> tuple[str, RewardFn]:
    """(name, the bound reward) of a `grpo.reward` value; RewardError when it cannot be used."""
    name, params = split(block)
    try:
        fn = registry.resolve(name, REWARDS, "reward")
    except registry.RegistryError as e:
        raise RewardError(f"grpo.reward: {e}") from None
    if not callable(fn) or inspect.isclass(fn):
        raise RewardError(f"grpo.reward {name!r} is a {type(fn).__name__}, not a function "
                          "fn(completion, answer, **params) -> float")
    try:
        inspect.signature(fn).bind("", "", **params)
    except TypeError as e:
        raise RewardError(f"grpo.reward {name!r} must be fn(completion, answer, **params) with the block's other "
                          f"keys ({sorted(params)}) as parameters: {e}") from None
    except ValueError:  # a builtin without a signature: bound at the first call
        pass
    return name, (lambda completion, answer: fn(completion, answer, **params)) if params else fn


def check(block: Any) -> list[tuple[str, str]]:
    try:
        build(block)
    except RewardError as e:
        return [("grpo.reward", str(e).removeprefix("grpo.reward: "))]
    return []


# the group statistics are float32: a reward's square, summed over a group, must stay below float32's 3.4e38
MAX_REWARD = 1e18


def score(fn: RewardFn, name: str, completions: Sequence[str], answers: Sequence[str],
          prompt_index: Sequence[int]) -> list[float]:
    """The reward of each completion; RewardError naming the prompt index and the plug-in on a failure."""
    out: list[float] = []
    for completion, answer, index in zip(completions, answers, prompt_index, strict=True):
        try:
            value = fn(completion, answer)
        except Exception as e:  # noqa: BLE001 - user code: any failure is named and ends the run as an error
            raise RewardError(f"reward plug-in {name!r} raised {type(e).__name__}: {e} on prompt index {index} "
                              f"(completion {completion!r})") from e
        if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise RewardError(f"reward plug-in {name!r} returned {value!r} for prompt index {index} (completion "
                              f"{completion!r}): a reward must be a finite number")
        if abs(float(value)) > MAX_REWARD:
            raise RewardError(f"reward plug-in {name!r} returned {value!r} for prompt index {index} (completion "
                              f"{completion!r}): a reward must lie within +-{MAX_REWARD:g}; larger ones overflow the "
                              "group's mean and std (float32) and would read as a diverged run")
        out.append(float(value))
    return out
