"""Projector blocks of STIR parameter files, and standalone projector ``.par`` files.

Supported (everything else is refused with the file and line):

* STIR's Parallelproj projector -- ``Projector Pair Using Parallelproj Parameters``,
  ``Forward Projector Using Parallelproj Parameters``, ``Back Projector Using Parallelproj
  Parameters`` with ``verbosity``, ``restrict to cylindrical FOV`` (default 1) and
  ``num_gpu_chunks`` (default 1; accepted, but stirgpu plans its chunks from memory budgets);
* stirgpu's own type ``stirgpu`` -- ``Projector Pair Using stirgpu Parameters`` (and the forward
  and back variants) with ``backend`` (auto/cpu/cuda), ``devices`` (``{0, 1}``),
  ``GPU memory budget (MB)``, ``host memory budget (MB)``, ``maximum views per chunk``,
  ``restrict to cylindrical FOV``, ``verbosity``;
* ``Separate Projectors`` with ``Forward projector type`` and ``Back projector type`` each
  ``Parallelproj`` or ``stirgpu``.

Both types compute STIR's Parallelproj (Joseph) projection; ``stirgpu`` only adds control
over where and in what memory it runs.  "MB" means 2**20 bytes.

Standalone files (as read by STIR's ``forward_project`` / ``back_project`` utilities):
``Forward Projector parameters :=`` / ``type := ...`` / ``End :=``, the same with
``Back Projector parameters``, and ``projector pair parameters :=`` /
``projector pair type := ...`` / ``End projector pair parameters :=``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from .grammar import Block, canonical_key, parse_par_file
from .keymap import Choice, Context, Key, Problem, TypeKey, as_bool, as_int_list, int_at_least, read_block

__all__ = ["ProjectorOptions", "ProjectorSettings", "read_projector_par", "MIB"]

#: bytes in the "MB" of the memory-budget keys
MIB = 2**20

PARALLELPROJ = "Parallelproj"
STIRGPU = "stirgpu"
SEPARATE = "Separate Projectors"
_BACKENDS = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class ProjectorOptions:
    """One projector (forward or back) as a parameter file selects it.

    ``type`` is ``"Parallelproj"`` or ``"stirgpu"``; both give STIR's Parallelproj numbers.
    The execution fields (``backend`` ... ``max_views_per_chunk``) can only be set through a
    ``stirgpu`` block; None means "as the scoped configuration says" (:func:`stirgpu.config`).
    """

    type: str = PARALLELPROJ
    restrict_to_cylindrical_fov: bool = True
    verbosity: int | None = None  #: accepted for STIR compatibility; no effect
    num_gpu_chunks: int = 1  #: Parallelproj's key; no effect (stirgpu streams)
    backend: str = "auto"
    devices: tuple[int, ...] | None = None
    gpu_memory_budget_mb: int | None = None
    host_memory_budget_mb: int | None = None
    max_views_per_chunk: int | None = None

    def __post_init__(self) -> None:
        if self.type not in (PARALLELPROJ, STIRGPU):
            raise ValueError(f"ProjectorOptions.type must be {PARALLELPROJ!r} or {STIRGPU!r}, not {self.type!r}")
        if self.backend not in _BACKENDS:
            raise ValueError(f"ProjectorOptions.backend must be one of {_BACKENDS}, not {self.backend!r}")
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))

    def config_changes(self) -> dict:
        """Keyword arguments for ``stirgpu.config(**changes)`` that apply this block's execution
        settings (memory budgets in bytes).  Empty for a Parallelproj block."""
        out: dict = {}
        if self.backend != "auto":
            out["backend"] = self.backend
        if self.devices is not None:
            out["devices"] = self.devices
        if self.gpu_memory_budget_mb is not None:
            out["gpu_memory_budget"] = self.gpu_memory_budget_mb * MIB
        if self.host_memory_budget_mb is not None:
            out["host_memory_budget"] = self.host_memory_budget_mb * MIB
        if self.max_views_per_chunk is not None:
            out["max_views_per_chunk"] = self.max_views_per_chunk
        return out

    def block_lines(self, role: str) -> list[str]:
        """``role`` is "Projector Pair", "Forward Projector" or "Back Projector"."""
        name = f"{role} Using {self.type} Parameters"
        body = [f"restrict to cylindrical FOV := {int(self.restrict_to_cylindrical_fov)}"]
        if self.verbosity is not None:
            body.append(f"verbosity := {self.verbosity}")
        if self.type == PARALLELPROJ:
            body.append(f"num_gpu_chunks := {self.num_gpu_chunks}")
        else:
            body.append(f"backend := {self.backend}")
            if self.devices is not None:
                body.append("devices := {" + ", ".join(str(d) for d in self.devices) + "}")
            if self.gpu_memory_budget_mb is not None:
                body.append(f"GPU memory budget (MB) := {self.gpu_memory_budget_mb}")
            if self.host_memory_budget_mb is not None:
                body.append(f"host memory budget (MB) := {self.host_memory_budget_mb}")
            if self.max_views_per_chunk is not None:
                body.append(f"maximum views per chunk := {self.max_views_per_chunk}")
        return [f"{name} :="] + ["  " + b for b in body] + [f"End {name} :="]


@dataclasses.dataclass(frozen=True)
class ProjectorSettings:
    """A projector pair, or a single forward/back projector, from a parameter file.

    ``role``: ``"pair"`` (both set), ``"forward"`` (``back`` is None) or ``"back"``
    (``forward`` is None).  ``pair_type``: the STIR type of a pair (``"Parallelproj"``,
    ``"stirgpu"`` or ``"Separate Projectors"``), None for a single projector.
    ``path``/``line``: where it was read (not compared).
    """

    role: str
    forward: ProjectorOptions | None
    back: ProjectorOptions | None
    pair_type: str | None = None
    path: Path | None = dataclasses.field(default=None, compare=False)
    line: int | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        want = {"pair": (True, True), "forward": (True, False), "back": (False, True)}.get(self.role)
        if want is None:
            raise ValueError(f"ProjectorSettings.role must be 'pair', 'forward' or 'back', not {self.role!r}")
        if want != (self.forward is not None, self.back is not None):
            raise ValueError(
                f"ProjectorSettings(role={self.role!r}) needs "
                f"{'a forward' if want[0] else 'no forward'} and {'a back' if want[1] else 'no back'} projector"
            )
        if (self.role == "pair") != (self.pair_type is not None):
            raise ValueError("ProjectorSettings.pair_type is required for a pair and only for a pair")
        if self.pair_type not in (None, PARALLELPROJ, STIRGPU, SEPARATE):
            raise ValueError(f"ProjectorSettings.pair_type {self.pair_type!r} is not supported")
        if self.pair_type in (PARALLELPROJ, STIRGPU) and not (
            self.forward is not None and self.forward == self.back and self.forward.type == self.pair_type
        ):
            raise ValueError(f"a {self.pair_type} pair has one set of options of that type for both projectors")

    def pair_lines(self) -> list[str]:
        """``projector pair type := ...`` and its block (for an OSMAPOSL file)."""
        fwd, back = self.forward, self.back
        if self.role != "pair" or fwd is None or back is None:  # (a pair has both: __post_init__)
            raise ValueError("pair_lines() needs a projector pair")
        lines = [f"projector pair type := {self.pair_type}"]
        if self.pair_type == SEPARATE:
            name = "Projector Pair Using Separate Projectors Parameters"
            inner = [
                f"Forward projector type := {fwd.type}",
                *fwd.block_lines("Forward Projector"),
                f"Back projector type := {back.type}",
                *back.block_lines("Back Projector"),
            ]
            lines += [f"{name} :="] + ["  " + s for s in inner] + [f"End {name} :="]
        else:
            lines += fwd.block_lines("Projector Pair")
        return lines

    def to_par(self) -> str:
        """The standalone parameter file for these settings (read back by :func:`read_projector_par`)."""
        if self.role == "pair":
            body, head, end = self.pair_lines(), "projector pair parameters", "End projector pair parameters"
        else:
            opts = self.forward if self.role == "forward" else self.back
            assert opts is not None  # (a forward or back projector's own: __post_init__)
            role = "Forward Projector" if self.role == "forward" else "Back Projector"
            body, head, end = [f"type := {opts.type}", *opts.block_lines(role)], f"{role} parameters", "End"
        return "\n".join([f"{head} :=", *("  " + s for s in body), f"{end} :=", ""])


# ---------------------------------------------------------------------------------------------
# block readers


def _backend(text: str, ctx: Context) -> str:
    v = text.strip().lower()
    if v not in _BACKENDS:
        raise Problem(f"must be one of {', '.join(_BACKENDS)}, got {text!r}")
    return v


def _devices(text: str, ctx: Context) -> tuple[int, ...]:
    ids = as_int_list(text, ctx)
    if not ids:
        raise Problem("must list at least one device id, like {0} or {0, 1}")
    if any(d < 0 for d in ids) or len(set(ids)) != len(ids):
        raise Problem(f"device ids must be distinct and >= 0, got {text!r}")
    return ids


def _no_processor(what: str) -> Callable[..., tuple]:
    def refuse(value: str, line: int, nxt: Block | None, ctx: Context):
        raise Problem(f"{what} is not supported by stirgpu (only 'None')")

    return refuse


_COMMON = (
    Key("restrict to cylindrical FOV", "restrict_to_cylindrical_fov", as_bool),
    Key("verbosity", "verbosity", int_at_least(0)),
)
_PARALLELPROJ_KEYS = _COMMON + (Key("num_gpu_chunks", "num_gpu_chunks", int_at_least(1)),)
_STIRGPU_KEYS = _COMMON + (
    Key("backend", "backend", _backend),
    Key("devices", "devices", _devices),
    Key("GPU memory budget (MB)", "gpu_memory_budget_mb", int_at_least(1)),
    Key("host memory budget (MB)", "host_memory_budget_mb", int_at_least(1)),
    Key("maximum views per chunk", "max_views_per_chunk", int_at_least(1)),
)
# STIR's ForwardProjectorByBin / BackProjectorByBin base keys (smoothing before/after projection)
_PRE = TypeKey(
    "pre data processor",
    "pre_data_processor",
    (Choice("None"),),
    other=_no_processor("smoothing the image before forward projection"),
)
_POST = TypeKey(
    "post data processor",
    "post_data_processor",
    (Choice("None"),),
    other=_no_processor("smoothing the image after back projection"),
)
_STIRGPU_ONLY = {
    canonical_key(k.name): f"'{k.name}' is a key of stirgpu's own projector blocks; use "
    f"'... type := stirgpu' with a '... Using stirgpu Parameters' block"
    for k in _STIRGPU_KEYS[len(_COMMON) :]
}


def _options(block: Block, ctx: Context, type_: str, extra: tuple = ()) -> ProjectorOptions:
    keys = (_PARALLELPROJ_KEYS if type_ == PARALLELPROJ else _STIRGPU_KEYS) + extra
    found = read_block(block, keys, ctx, hints=_STIRGPU_ONLY if type_ == PARALLELPROJ else None)
    fields = {k: f.value for k, f in found.items() if k not in ("pre_data_processor", "post_data_processor")}
    return ProjectorOptions(type=type_, **fields)


def _reader(type_: str, extra: tuple = ()):
    return lambda block, ctx: _options(block, ctx, type_, extra)


_MATRIX = (
    "STIR's projection-matrix projectors (ray tracing, etc.) compute different numbers than "
    "Parallelproj; use 'Parallelproj' or 'stirgpu'"
)
_NIFTYPET = "NiftyPET is a different projector (Siemens mMR only); use 'Parallelproj' or 'stirgpu'"

FORWARD_TYPE = TypeKey(
    "Forward projector type",
    "forward",
    (
        Choice(PARALLELPROJ, "Forward Projector Using Parallelproj Parameters", _reader(PARALLELPROJ, (_PRE,))),
        Choice(STIRGPU, "Forward Projector Using stirgpu Parameters", _reader(STIRGPU, (_PRE,))),
        Choice(
            "Ray Tracing",
            refuse="STIR's ray-tracing forward projector computes different numbers than "
            "Parallelproj; use 'Parallelproj' or 'stirgpu'",
        ),
        Choice("Matrix", refuse=_MATRIX),
        Choice("NiftyPET", refuse=_NIFTYPET),
    ),
)
BACK_TYPE = TypeKey(
    "Back projector type",
    "back",
    (
        Choice(PARALLELPROJ, "Back Projector Using Parallelproj Parameters", _reader(PARALLELPROJ, (_POST,))),
        Choice(STIRGPU, "Back Projector Using stirgpu Parameters", _reader(STIRGPU, (_POST,))),
        Choice(
            "Interpolation",
            refuse="STIR's interpolating back projector is not the adjoint of Parallelproj; "
            "use 'Parallelproj' or 'stirgpu'",
        ),
        Choice("Matrix", refuse=_MATRIX),
        Choice("NiftyPET", refuse=_NIFTYPET),
    ),
)


def _separate(block: Block, ctx: Context) -> ProjectorSettings | None:
    found = read_block(block, (FORWARD_TYPE, BACK_TYPE), ctx)
    missing = [spec for spec in (FORWARD_TYPE, BACK_TYPE) if found.get(spec.field) is None]
    for spec in missing:
        if spec.field not in ctx.failed:
            ctx.report(f"'{block.raw_key}' needs '{spec.name} :=' (Parallelproj or stirgpu)", block.line)
    if missing:
        return None  # (reported: the settings are not built)
    return ProjectorSettings("pair", found["forward"].value, found["back"].value, SEPARATE)


def _same_pair(type_: str):
    def read(block: Block, ctx: Context) -> ProjectorSettings:
        opts = _options(block, ctx, type_)
        return ProjectorSettings("pair", opts, opts, type_)

    return read


PAIR_TYPE = TypeKey(
    "Projector pair type",
    "projectors",
    (
        Choice(PARALLELPROJ, "Projector Pair Using Parallelproj Parameters", _same_pair(PARALLELPROJ)),
        Choice(STIRGPU, "Projector Pair Using stirgpu Parameters", _same_pair(STIRGPU)),
        Choice(SEPARATE, "Projector Pair Using Separate Projectors Parameters", _separate),
        Choice("Matrix", refuse=_MATRIX),
        Choice("NiftyPET", refuse=_NIFTYPET),
    ),
)

# standalone files: root block -> (role, the key selecting the projector)
_ROOTS = {
    canonical_key("Forward Projector parameters"): ("forward", TypeKey("type", "forward", FORWARD_TYPE.choices)),
    canonical_key("Back Projector parameters"): ("back", TypeKey("type", "back", BACK_TYPE.choices)),
    canonical_key("projector pair parameters"): ("pair", PAIR_TYPE),
}


def projector_settings_from_block(root: Block, ctx: Context) -> ProjectorSettings:
    """Read a standalone projector parameter block (see module docstring)."""
    if root.key not in _ROOTS:
        ctx.report(
            f"not a projector parameter file: it starts with '{root.raw_key} :=' instead of "
            f"'Forward Projector parameters :=', 'Back Projector parameters :=' or "
            f"'projector pair parameters :='",
            root.line,
        )
        ctx.check()
    role, spec = _ROOTS[root.key]
    found = read_block(root, (spec,), ctx)
    if spec.field not in found and spec.field not in ctx.failed:
        ctx.report(
            f"'{root.raw_key}' needs '{spec.name} :=' (Parallelproj or stirgpu); STIR would fall "
            f"back to a projector stirgpu does not implement",
            root.line,
        )
    ctx.check()  # every problem of the file at once
    value = found[spec.field].value
    path = None if ctx.path is None else Path(ctx.path)
    if role == "pair":
        return dataclasses.replace(value, path=path, line=found[spec.field].line)
    return ProjectorSettings(
        role,
        value if role == "forward" else None,
        value if role == "back" else None,
        path=path,
        line=found[spec.field].line,
    )


def read_projector_par(path: str | os.PathLike, *, env: Mapping[str, str] | None = None) -> ProjectorSettings:
    """Read a standalone projector parameter file (STIR's ``forward_project`` /
    ``back_project`` format, or a ``projector pair parameters`` file).

    Raises :class:`~stirgpu.errors.ParFileProblems` listing every problem (unknown keys,
    unsupported projectors or options, out-of-range values), each with the file and line.
    """
    root = parse_par_file(path, env=env)
    return projector_settings_from_block(root, Context(os.fspath(path), Path.cwd()))
