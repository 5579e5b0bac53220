"""STIR's 3-D median filter (``MedianImageFilter3D``, filter type ``Median``), value for value.

STIR's ``MedianArrayFilter3D`` visits the voxels in (z, y, x) order; for each it copies the
voxels of the ``(2 rz + 1) x (2 ry + 1) x (2 rx + 1)`` box that lie inside the image into the
front of one buffer of the full box size (zeros at first, kept between voxels), and calls the
C++ library's ``std::nth_element`` on the *whole* buffer with ``nth = n // 2`` (``n`` the voxels
copied).  The result is the buffer's ``nth`` element for odd ``n``, and for even ``n`` the mean
of its ``nth`` and ``nth - 1`` elements as they lie after ``nth_element``.

So wherever the box is cut by the image's edge (``n`` smaller than the box), the result also
depends on what the previous voxels left in the back of the buffer, in the order that
``nth_element`` left it.  To give STIR's numbers there too, this kernel runs the same sequence
on one buffer with the algorithm of GCC's libstdc++ (what STIR is built with on Linux):
introselect with a median-of-three pivot moved to the front, an unguarded Hoare partition,
insertion sort on ranges of at most 3, and a heap select after ``2 floor(log2(size))``
partitions.  Inside the image (a full box of odd size) this is the true median.

The loop is sequential, like STIR's (each voxel depends on the buffer the last one left).
"""

from __future__ import annotations

import numpy as np

from ..jit import cached_njit

__all__ = ["stir_median_filter"]


@cached_njit(nogil=True)
def _swap(a, i, j):
    t = a[i]
    a[i] = a[j]
    a[j] = t


@cached_njit(nogil=True)
def _insertion_sort(a, first, last):
    if first == last:
        return
    for i in range(first + 1, last):
        val = a[i]
        if val < a[first]:
            for j in range(i, first, -1):  # move the range [first, i) one place up
                a[j] = a[j - 1]
            a[first] = val
        else:
            hole = i
            prev = i - 1
            while val < a[prev]:
                a[hole] = a[prev]
                hole = prev
                prev -= 1
            a[hole] = val


@cached_njit(nogil=True)
def _move_median_to_first(a, result, x, y, z):
    if a[x] < a[y]:
        if a[y] < a[z]:
            _swap(a, result, y)
        elif a[x] < a[z]:
            _swap(a, result, z)
        else:
            _swap(a, result, x)
    elif a[x] < a[z]:
        _swap(a, result, x)
    elif a[y] < a[z]:
        _swap(a, result, z)
    else:
        _swap(a, result, y)


@cached_njit(nogil=True)
def _unguarded_partition(a, first, last, pivot):
    while True:
        while a[first] < a[pivot]:
            first += 1
        last -= 1
        while a[pivot] < a[last]:
            last -= 1
        if not first < last:
            return first
        _swap(a, first, last)
        first += 1


@cached_njit(nogil=True)
def _adjust_heap(a, first, hole, length, value):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if a[first + child] < a[first + child - 1]:
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    while hole > top:  # push the value back up
        parent = (hole - 1) // 2
        if not a[first + parent] < value:
            break
        a[first + hole] = a[first + parent]
        hole = parent
    a[first + hole] = value


@cached_njit(nogil=True)
def _heap_select(a, first, middle, last):
    length = middle - first
    if length >= 2:  # make_heap
        parent = (length - 2) // 2
        while True:
            _adjust_heap(a, first, parent, length, a[first + parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, last):
        if a[i] < a[first]:  # pop_heap into i
            value = a[i]
            a[i] = a[first]
            _adjust_heap(a, first, 0, length, value)


@cached_njit(nogil=True)
def _nth_element(a, nth, last):
    """libstdc++'s ``std::nth_element(a, a + nth, a + last)``."""
    first = 0
    if first == last or nth == last:
        return
    depth = 0
    n = last - first
    while n > 1:  # std::__lg
        n >>= 1
        depth += 1
    depth *= 2
    while last - first > 3:
        if depth == 0:
            _heap_select(a, first, nth + 1, last)
            _swap(a, first, nth)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _move_median_to_first(a, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(a, first + 1, last, first)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(a, first, last)


@cached_njit(nogil=True)
def _median3d(image, rz, ry, rx, out):
    nz, ny, nx = image.shape
    size = (2 * rz + 1) * (2 * ry + 1) * (2 * rx + 1)
    buf = np.zeros(size, dtype=np.float32)
    two = np.float32(2)
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                n = 0
                for zz in range(max(z - rz, 0), min(z + rz, nz - 1) + 1):
                    for yy in range(max(y - ry, 0), min(y + ry, ny - 1) + 1):
                        for xx in range(max(x - rx, 0), min(x + rx, nx - 1) + 1):
                            buf[n] = image[zz, yy, xx]
                            n += 1
                nth = n // 2
                _nth_element(buf, nth, size)
                if n % 2 == 1:
                    out[z, y, x] = buf[nth]
                else:
                    out[z, y, x] = np.float32(buf[nth] + buf[nth - 1]) / two


def stir_median_filter(image: np.ndarray, radius: tuple[int, int, int]) -> np.ndarray:
    """STIR's ``Median`` filter of a float32 (z, y, x) numpy image with mask radii
    ``(rz, ry, rx)`` (STIR's ``mask radius z/y/x``): a new float32 array."""
    rz, ry, rx = (int(r) for r in radius)
    if min(rz, ry, rx) < 0:
        raise ValueError(f"median mask radii must be >= 0, got {radius}")
    x = np.ascontiguousarray(image, dtype=np.float32)
    out = np.empty_like(x)
    _median3d(x, rz, ry, rx, out)
    return out
