"""A checkpoint's chat template (tokenizer_config.json's `chat_template`, a Jinja2 string) rendered as transformers'
`apply_chat_template(..., tokenize=False)` renders it (transformers/utils/chat_template_utils.py: a sandboxed
environment with trim_blocks, lstrip_blocks and the loop-controls extension, `raise_exception`, `strftime_now`, a
`tojson` filter, and the special tokens of tokenizer_config.json as variables), without transformers.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from suite.data.base import DataMissing, json_object

CONFIG = "tokenizer_config.json"


class ChatTemplateError(DataMissing):
    pass


def _token_text(value: Any) -> str | None:
    """A special token of tokenizer_config.json: a string, or an AddedToken dict with `content`."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def read_config(folder: Path) -> dict[str, Any]:
    return json_object(Path(folder) / CONFIG, ChatTemplateError,
                       "the recipe formats its prompts with the checkpoint's chat template (a Hugging Face model "
                       "folder ships tokenizer_config.json); copy it there, or set data.chat_template: false")


class ChatTemplate:
    def __init__(self, folder: str | Path):
        self.path = Path(folder) / CONFIG
        self.config = read_config(Path(folder))
        source = self.config.get("chat_template")
        if isinstance(source, list):  # several named templates: the default one
            source = next((t.get("template") for t in source if t.get("name") == "default"), None)
        if not isinstance(source, str) or not source:
            raise ChatTemplateError(f"{self.path} has no chat_template: a base model's folder, or an older one "
                                    "(set data.chat_template: false to prompt with the bare question)")
        try:
            import jinja2
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise ChatTemplateError("rendering a chat template needs jinja2: pip install jinja2") from None

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
                   sort_keys: bool = False) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self.template = env.from_string(source)
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"{self.path}: chat_template does not parse ({e})") from None
        self.special = {k: _token_text(v) for k, v in self.config.items() if k.endswith("_token")}

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The prompt text. A template that raises (its own `raise_exception`, the sandbox's SecurityError, any
        other error) is bad input: ChatTemplateError naming the file, found while the data loads (before the
        clock, exit 2), never an error run with a traceback."""
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=None,
                                        documents=None, **{k: v for k, v in self.special.items() if v is not None})
        except Exception as e:  # noqa: BLE001 - a template is code from the checkpoint: whatever it raises is its own
            first = next((m.get("content") for m in messages if isinstance(m, dict)), "")
            raise ChatTemplateError(f"{self.path}: chat_template raised {type(e).__name__}: {e} (rendering the "
                                    f"conversation that starts {str(first)[:60]!r})") from None
