"""Where in a policy file each problem is: YAML nodes and pydantic errors -> (line, field, message).

Pure: text in, issues out. `load_with_nodes` parses the YAML once and keeps the composed node
tree (every node knows its line); `issues_from_errors` turns pydantic's error list into
`PolicyIssue`s whose line is that of the node the error names, or of its nearest parent that
exists in the file (a missing field points at the mapping that lacks it).

    data, root = load_with_nodes(text)
    try: Policy.model_validate(data)
    except ValidationError as exc: issues = issues_from_errors(exc.errors(), root, Policy)
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel

Loc = tuple[str | int, ...]


class PolicyIssue(NamedTuple):
    """One problem in a policy file: 1-based line (None: not tied to a line), field, message."""

    line: int | None
    loc: Loc
    msg: str

    @property
    def path(self) -> str:
        """The field as an operator reads it: `rules[3].actions[1]`."""
        return format_path(self.loc)

    @property
    def dotted(self) -> str:
        """The field as pydantic and settings spell it: `rules.3.actions.1`."""
        return ".".join(str(p) for p in self.loc)

    def render(self, source: str) -> str:
        """`policy.yaml:42: rules[3].actions[1]: unknown action 'rebot'; ...`"""
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.path}: {self.msg}" if self.loc else f"{where}: {self.msg}"


def format_path(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --- YAML ----------------------------------------------------------------------------------


def load_with_nodes(text: str) -> tuple[Any, yaml.Node | None]:
    """The document as `yaml.safe_load` gives it, and its composed node tree (None if empty).
    Raises yaml.YAMLError."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
        return data, root
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """(1-based line, what is wrong) for a YAML syntax error, without PyYAML's mark dump."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    if problem is None:
        return (mark.line + 1 if mark else None), str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return (mark.line + 1 if mark else None), (f"{problem} ({context})" if context else problem)


def node_line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _merged_pairs(node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    """The mapping's own pairs, then those of `<<: *anchor` merges (as safe_load applies them)."""
    own = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
    merged: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for source in sources:
                if isinstance(source, yaml.MappingNode):
                    merged += _merged_pairs(source)
    return own + merged


def _child(node: yaml.Node, part: str | int, short_form: bool = False) -> tuple[yaml.Node, yaml.Node] | None:
    """(`node[part]`, the node whose line names it: the key of a mapping entry), or None.
    With `short_form` (a mapping that is a list item, like an action), a field missing from a
    one-key mapping is looked up in its value: `diag: {level: 3}`, `diag: 3`."""
    if isinstance(node, yaml.SequenceNode):
        if isinstance(part, int) and 0 <= part < len(node.value):
            return node.value[part], node.value[part]
        return None
    if isinstance(node, yaml.MappingNode):
        pairs = _merged_pairs(node)
        for key, value in pairs:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value, key
        if short_form and len(pairs) == 1:
            value = pairs[0][1]
            if isinstance(value, yaml.ScalarNode):
                return value, value
            if isinstance(value, yaml.MappingNode):
                return _child(value, part)
    return None


class Found(NamedTuple):
    node: yaml.Node | None  # the deepest node along the location that exists
    depth: int  # how many parts of the location it consumed
    line: int | None  # 1-based line that names it (a mapping entry's key line)


def locate(root: yaml.Node | None, loc: Sequence[str | int]) -> Found:
    """The deepest node along `loc` that exists in the file: a missing field gives its parent."""
    node, depth, parent, where = root, 0, None, root
    for part in loc:
        if node is None:
            break
        child = _child(node, part, short_form=isinstance(parent, yaml.SequenceNode))
        if child is None:
            break
        parent, (node, where), depth = node, child, depth + 1
    return Found(node, depth, node_line(where))


# --- pydantic errors -----------------------------------------------------------------------

# A model-level check cannot give pydantic a location, so its message starts with the field it
# means: "rules[3] (gpu_hardware:*) uses 'escalate' ..." or "xid_buckets.RESET_GPU: ...".
_LEADING_PATH = re.compile(r"(?P<path>[A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*)(?::\s+|\s+)")
_PATH_PART = re.compile(r"\[(\d+)\]|\.?([A-Za-z_]\w*)")


def _parse_path(path: str) -> Loc:
    return tuple(int(i) if i else name for i, name in _PATH_PART.findall(path))


def _split_leading_path(message: str, root: yaml.Node | None) -> tuple[Loc, str]:
    """("rules[3] (x) names ladder 'y'") -> (("rules", 3), "(x) names ladder 'y'") when the
    file has that top-level key; else no location and the message unchanged."""
    m = _LEADING_PATH.match(message)
    if m is None or root is None:
        return (), message
    loc = _parse_path(m["path"])
    if _child(root, loc[0]) is None:
        return (), message
    return loc, message[m.end():]


def _short(value: Any) -> str | None:
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return None


def _model_at(model: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `loc` (for listing its fields)."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif typing.get_origin(tp) in (list, set, frozenset, tuple):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """`X | None` and `X | str` -> X when exactly one member is a model or container."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        rich = [a for a in members if typing.get_origin(a) or (isinstance(a, type) and issubclass(a, BaseModel))]
        if len(rich) == 1:
            return rich[0]
        if len(members) == 1:
            return members[0]
    return tp


def _unknown_field(loc: Loc, model: type[BaseModel]) -> str:
    name = str(loc[-1])
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return f"unknown field {name!r}"
    fields = list(owner.model_fields)
    close = difflib.get_close_matches(name, fields, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown field {name!r}{hint}; fields here: {', '.join(fields)}"


def _message(err: dict, loc: Loc, model: type[BaseModel]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    got = _short(err.get("input"))
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden" and loc:
        return _unknown_field(loc, model)
    if kind == "enum" and got is not None:
        return f"{got} is not one of {ctx.get('expected', 'the allowed values')}"
    return f"{err.get('msg', 'invalid')} (got {got})" if got is not None else err.get("msg", "invalid")


def issues_from_errors(
    errors: Iterable[dict], root: yaml.Node | None, model: type[BaseModel]
) -> list[PolicyIssue]:
    """One PolicyIssue per pydantic error, in file order; `model` validated the document."""
    issues = []
    for err in errors:
        loc: Loc = tuple(err.get("loc", ()))
        message = _message(err, loc, model)
        if not loc:
            loc, message = _split_leading_path(message, root)
        found = locate(root, loc)
        if found.depth < len(loc) and err.get("type") != "missing" and not isinstance(found.node, yaml.MappingNode):
            # Parts below a scalar are the model's own (the `kind` of a bare `- rebot`): the
            # operator wrote the scalar, so name that.
            loc = loc[: found.depth]
        issues.append(PolicyIssue(found.line, loc, message))
    return sorted(issues, key=lambda i: (i.line is None, i.line or 0))
