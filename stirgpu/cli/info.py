"""``stirgpu info FILE.hs|FILE.hv [--json] [--stats]``: what a file holds (like STIR's
``list_projdata_info`` and ``list_image_info``).

Projection data: scanner, segments (ring differences, axial positions, m range),
views (phi range), tangential positions (s range), storage order, number format,
byte order, arc correction, TOF, and whether the header is a template.  ``--stats``
adds min/max/sum/mean of the finite values and the count of NaN and ±Inf values (read chunk
by chunk, memory-bounded).  Images: sizes, voxel sizes, origin, min indices, first pixel
offset, and the same statistics of the values when the data file exists.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..arrays import count_non_finite
from ..formats.image import image_info_from_header, read_image
from ..formats.interfile import key_id, read_header
from ..formats.projdata_disk import ProjDataFromFile
from ..formats.rawfile import data_file_is_a_folder, dtype_from_keys

__all__ = ["register", "run", "describe", "describe_projdata", "describe_image", "format_text"]

DESCRIPTION = """\
Print what an Interfile file holds, like STIR's list_projdata_info and list_image_info.

Projection data (.hs): the scanner, the segments (ring differences, axial positions,
axial coordinate m), views (angles), tangential positions (s), storage order, number
format, byte order, arc correction, TOF, and whether the header is a template.
Images (.hv): sizes, voxel sizes, origin, index ranges, first pixel offset and, when
the data file exists, the min, max, sum and mean of the finite values and how many are
NaN or ±Inf.  Nothing is written."""

EPILOG = """\
examples:
  stirgpu info prompts.hs
  stirgpu info prompts.hs --stats
  stirgpu info image.hv --json"""


def register(subparsers) -> None:
    import argparse

    p = subparsers.add_parser(
        "info",
        help="print the geometry of projection data (.hs) or an image (.hv)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="Interfile header: projection data (.hs) or an image (.hv)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--stats",
        action="store_true",
        help="projection data: also the min, max, sum and mean of the finite values and the count of "
        "NaN and ±Inf values (reads the whole data file, chunk by chunk); images show them always",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    d = describe(args.file, stats=args.stats)
    print(json.dumps(d, indent=1) if args.json else format_text(d))
    return 0


def _dtype_text(dt: np.dtype) -> tuple[str, str]:
    order = "little-endian" if (dt.byteorder == "<" or (dt.byteorder in "=|" and np.little_endian)) else "big-endian"
    return np.dtype(dt).newbyteorder("=").name, order


def describe(path, stats: bool = False) -> dict:
    """A JSON-able description of an Interfile projection-data or image header."""
    hdr = read_header(path)
    if key_id(hdr.get_str("PET data type", default="")) == "image":
        return describe_image(path)
    return describe_projdata(path, stats=stats)


def _stats_of(chunks) -> dict:
    """min, max, sum and mean over the finite values, and how many values are NaN or ±Inf
    (``non_finite``); min, max and mean are None when no value is finite."""
    lo, hi, total, finite, bad = math.inf, -math.inf, 0.0, 0, 0
    for a in chunks:
        n_bad = count_non_finite(a)
        if n_bad:
            a = a[np.isfinite(a)]
            bad += n_bad
        if a.size:
            lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
            total += float(a.sum(dtype=np.float64))
            finite += a.size
    if not finite:
        return {"min": None, "max": None, "sum": 0.0, "mean": None, "non_finite": bad}
    return {"min": lo, "max": hi, "sum": total, "mean": total / finite, "non_finite": bad}


def describe_projdata(path, stats: bool = False) -> dict:
    with ProjDataFromFile.open(path, "r") as pd:
        pdi = pd.proj_data_info
        sc = pdi.get_scanner()
        h = pd.header
        number_format, byte_order = _dtype_text(h.dtype)
        segs = []
        for s in pdi.segment_nums:
            na = pdi.get_num_axial_poss(s)
            m = pdi.get_m(s, np.array([0, na - 1]))
            segs.append(
                {
                    "segment": s,
                    "min_ring_diff": pdi.get_min_ring_difference(s),
                    "max_ring_diff": pdi.get_max_ring_difference(s),
                    "num_axial_poss": na,
                    "m_min_mm": float(m[0]),
                    "m_max_mm": float(m[1]),
                }
            )
        nv = pdi.get_num_views()
        phi = pdi.get_phi(np.array([0, nv - 1]))
        tmin, tmax = pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num()
        s_rng = pdi.get_s(np.array([tmin, tmax]))
        d = {
            "file": str(Path(path)),
            "kind": "projection data",
            "template": pd.is_template,
            "data_file": None if h.data_path is None else str(h.data_path),
            "storage_order": pd.storage_order.name.lower(),
            "number_format": number_format,
            "byte_order": byte_order,
            "data_offset": h.data_offset,
            "scale_factor": h.scale_factor,
            "scanner": {
                "name": sc.name,
                "num_rings": sc.num_rings,
                "num_detectors_per_ring": sc.num_detectors_per_ring,
                "inner_ring_radius_mm": sc.inner_ring_radius,
                "average_depth_of_interaction_mm": sc.average_depth_of_interaction,
                "effective_ring_radius_mm": sc.effective_ring_radius,
                "ring_spacing_mm": sc.ring_spacing,
                "default_bin_size_mm": sc.default_bin_size,
                "view_offset_deg": math.degrees(sc.intrinsic_azimuthal_tilt),
                "max_FOV_radius_mm": sc.max_FOV_radius,
                "max_num_timing_poss": sc.max_num_timing_poss,
            },
            "arc_corrected": pdi.is_arc_corrected(),
            "sampling_in_s_mm": pdi.get_sampling_in_s(),
            "tof": _tof_facts(pdi),
            "segments": segs,
            "views": {
                "num": nv,
                "min": 0,
                "max": nv - 1,
                "mashing_factor": pdi.get_view_mashing_factor(),
                "phi_min_deg": math.degrees(phi[0]),
                "phi_max_deg": math.degrees(phi[1]),
            },
            "tangential": {
                "num": pdi.get_num_tangential_poss(),
                "min": tmin,
                "max": tmax,
                "s_min_mm": float(s_rng[0]),
                "s_max_mm": float(s_rng[1]),
            },
            "num_bins": pdi.total_num_bins,
        }
        if stats and not pd.is_template:
            d["values"] = _stats_of(
                pd.read_views(s, v, timing_pos=t)
                for t in range(pd.get_min_tof_pos_num(), pd.get_max_tof_pos_num() + 1)
                for s in pdi.segment_nums
                for v in pd.view_chunks(s)
            )
    return d


def _tof_facts(pdi) -> dict:
    """The TOF sampling of the data (STIR's ``get_sampling_in_k``, the scanner's timing resolution
    and the Gaussian kernel's sigma the projectors use); widths and resolution None for non-TOF."""
    tof = pdi.tof
    return {
        "is_tof": pdi.is_tof_data(),
        "num_tof_poss": pdi.get_num_tof_poss(),
        "min_tof_pos": pdi.get_min_tof_pos_num(),
        "max_tof_pos": pdi.get_max_tof_pos_num(),
        "mash_factor": tof.mash_factor if tof.is_tof else None,
        "bin_width_mm": pdi.get_sampling_in_k(0) if tof.is_tof else None,
        "timing_resolution_ps": tof.timing_resolution_ps if tof.is_tof else None,
        "sigma_mm": tof.sigma_mm() if tof.is_tof else None,
    }


def describe_image(path) -> dict:
    hdr = read_header(path)
    info = image_info_from_header(hdr)
    number_format, byte_order = _dtype_text(dtype_from_keys(hdr))
    dp = hdr.get_path("name of data file", default=None)
    if dp is not None and dp.is_dir():
        raise data_file_is_a_folder(dp, hdr.path)
    has_data = dp is not None and dp.is_file() and dp.stat().st_size > 0
    d = {
        "file": str(Path(path)),
        "kind": "image",
        "data_file": None if dp is None else str(dp),
        "number_format": number_format,
        "byte_order": byte_order,
        "shape_zyx": list(info.shape),
        "voxel_size_zyx_mm": list(info.voxel_size),
        "origin_zyx_mm": list(info.origin),
        "min_indices_zyx": list(info.get_min_indices()),
        "max_indices_zyx": list(info.get_max_indices()),
        "first_pixel_offset_zyx_mm": list(info.first_pixel_offset),
        "has_data": has_data,
    }
    if has_data:
        d["values"] = _stats_of([read_image(path).array])
    return d


def _f(x: float) -> str:
    return f"{x:.6g}"


def _triple(t, unit: str = "") -> str:
    return "(" + ", ".join(_f(v) if isinstance(v, float) else str(v) for v in t) + ")" + unit


def _values_line(v: dict) -> str:
    """``values: min ..., max ..., sum ..., mean ...`` (of the finite values), with the count of
    those that are not."""
    bad = v["non_finite"]
    if v["min"] is None:
        line = "  values: none finite"
    else:
        line = f"  values: min {_f(v['min'])}, max {_f(v['max'])}, sum {_f(v['sum'])}, mean {_f(v['mean'])}"
    if bad:
        values = "value" if bad == 1 else "values"
        line += f"{' (of the finite values)' if v['min'] is not None else ''}; {bad} non-finite {values} (NaN or ±Inf)"
    else:
        line += "; no NaN or ±Inf"
    return line


def format_text(d: dict) -> str:
    """The readable form of :func:`describe`'s output."""
    lines = []
    if d["kind"] == "image":
        data = d["data_file"] if d["has_data"] else f"{d['data_file']} (absent)"
        lines += [
            f"Image: {d['file']}",
            f"  data file: {data}; {d['number_format']} {d['byte_order']}",
            f"  size (z, y, x): {_triple(d['shape_zyx'])}",
            f"  voxel size (z, y, x): {_triple(d['voxel_size_zyx_mm'], ' mm')}",
            f"  origin (z, y, x): {_triple(d['origin_zyx_mm'], ' mm')}",
            f"  min indices (z, y, x): {_triple(d['min_indices_zyx'])}, max indices: {_triple(d['max_indices_zyx'])}",
            f"  first pixel offset (z, y, x): {_triple(d['first_pixel_offset_zyx_mm'], ' mm')}",
        ]
    else:
        sc = d["scanner"]
        what = "template (geometry only; no data)" if d["template"] else "data"
        lines += [
            f"Projection data: {d['file']}",
            f"  {what}; data file: {d['data_file']}",
            f"  storage: {d['storage_order']} order, {d['number_format']} {d['byte_order']}, "
            f"offset {d['data_offset']} bytes, scale factor {_f(d['scale_factor'])}",
            f"  scanner: {sc['name']}: {sc['num_rings']} rings, {sc['num_detectors_per_ring']} "
            f"detectors per ring, inner radius {_f(sc['inner_ring_radius_mm'])} mm, DOI "
            f"{_f(sc['average_depth_of_interaction_mm'])} mm, ring spacing {_f(sc['ring_spacing_mm'])} mm, "
            f"view offset {_f(sc['view_offset_deg'])} deg",
            f"  arc-corrected: {'yes' if d['arc_corrected'] else 'no'} "
            f"(sampling in s {_f(d['sampling_in_s_mm'])} mm at the centre)",
        ]
        tof = d["tof"]
        lines.append(
            "  TOF: no"
            if not tof["is_tof"]
            else f"  TOF: {tof['num_tof_poss']} timing positions ({tof['min_tof_pos']}..{tof['max_tof_pos']}), "
            f"mash factor {tof['mash_factor']}, bin width {_f(tof['bin_width_mm'])} mm, timing resolution "
            f"{_f(tof['timing_resolution_ps'])} ps FWHM (kernel sigma {_f(tof['sigma_mm'])} mm)"
        )
        lines.append(
            f"  segments: {len(d['segments'])} ({d['segments'][0]['segment']}..{d['segments'][-1]['segment']})"
        )
        lines.append("    segment  ring differences  axial positions  m range (mm)")
        for s in d["segments"]:
            lines.append(
                f"    {s['segment']:7d}  [{s['min_ring_diff']:4d}, {s['max_ring_diff']:4d}]      "
                f"{s['num_axial_poss']:15d}  [{_f(s['m_min_mm'])}, {_f(s['m_max_mm'])}]"
            )
        v, t = d["views"], d["tangential"]
        lines += [
            f"  views: {v['num']} ({v['min']}..{v['max']}, mashing {v['mashing_factor']}), "
            f"phi [{_f(v['phi_min_deg'])}, {_f(v['phi_max_deg'])}] deg",
            f"  tangential positions: {t['num']} ({t['min']}..{t['max']}), "
            f"s [{_f(t['s_min_mm'])}, {_f(t['s_max_mm'])}] mm",
            f"  bins: {d['num_bins']}",
        ]
    if "values" in d:
        lines.append(_values_line(d["values"]))
    return "\n".join(lines)
