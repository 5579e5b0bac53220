// A warp's back-projection footprints summed by register shuffles before their atomics: one
// atomic per voxel the warp touches at a step instead of one per lane and corner (the back
// projection is bound by the number of float updates reaching L2: docs/kernel-tuning.md).
// Included by joseph.cu.
#pragma once

#ifndef SG_FULL
#define SG_FULL 0xffffffffu
#endif

// Add (left, right) to the two neighbouring floats at q, skipping zeros: a zero is a corner outside
// the target (or nothing to add), whose address must not be written.  With SG_BACK_PAIRS (sm_90's
// 8-byte vector atomics), a pair of non-zero sums at an 8-byte-aligned address takes one atomic.
#ifndef SG_BACK_PAIRS
#define SG_BACK_PAIRS 0
#endif
__device__ __forceinline__ void segsum_add_pair(float *q, float left, float right)
{
#if SG_BACK_PAIRS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (left != 0.0f && right != 0.0f && ((unsigned long long)q & 7ull) == 0ull)
    {
        atomicAdd(reinterpret_cast<float2 *>(q), make_float2(left, right));
        return;
    }
#endif
    if (left != 0.0f)
        atomicAdd(q, left);
    if (right != 0.0f)
        atomicAdd(q + 1, right);
}

// Exact aggregation of the warp's 2x2 footprints with register shuffles (the back projection of
// joseph.cu).
// Runs = maximal groups of consecutive ACTIVE lanes with equal (key, o) (same voxels:
// lanes of one key are on one plane of one buffer).  A segmented inclusive scan leaves
// each run's sums of c00, c01, c10, c11 in its last lane, which adds them once:
// column o gets the run's c00 (+ the previous run's c01 when that run, ending at the lane
// before this run's head, has the same key and offset o - 1), column o + 1 the run's c01
// unless the next run (offset o + 1, same key) takes it; row 1 (o + su) likewise.  Any
// lane configuration is exact (non-monotone offsets or other keys only merge less).
// Every lane must call this (all intrinsics are unconditional); `act` false: adds nothing.
template <typename Idx>
__device__ __forceinline__ void segsum_step(unsigned amask, bool act, int key, int key_left, Idx o, Idx su,
                                            float *buf, float c00, float c01, float c10, float c11)
{
    const int lane = (int)(threadIdx.x & 31u);
    const Idx o_left = __shfl_up_sync(SG_FULL, o, 1);
    const bool with_left = act && lane > 0 && ((amask >> (lane - 1)) & 1u) && key_left == key;
    const bool cont = with_left && o_left == o;      // continues the run of the lane to its left
    const bool take = with_left && o_left + 1 == o;  // a head next to a run at o - 1
    const unsigned heads = __ballot_sync(SG_FULL, !cont);  // inactive lanes are heads too
    const unsigned takes = __ballot_sync(SG_FULL, take);
    // lane 0 is always a head; (2u << 31) - 1u == 0xffffffff
    const int head = 31 - __clz(heads & ((2u << lane) - 1u));
    const int d = lane - head;  // distance to this lane's run head (0 for inactive lanes)
    float s00 = c00, s01 = c01, s10 = c10, s11 = c11;
    // Segmented inclusive scan.  `more` (warp-uniform, from the ballot): bit t set iff
    // lane t has d >= off, i.e. lanes t-off+1..t all continue a run; the loop stops when
    // no lane needs another step, so every lane runs every trip and every shuffle.
    unsigned more = ~heads;
    for (int off = 1; more != 0u; off <<= 1)
    {
        const float y00 = __shfl_up_sync(SG_FULL, s00, off);
        const float y01 = __shfl_up_sync(SG_FULL, s01, off);
        const float y10 = __shfl_up_sync(SG_FULL, s10, off);
        const float y11 = __shfl_up_sync(SG_FULL, s11, off);
        if (d >= off)
        {
            s00 += y00;
            s01 += y01;
            s10 += y10;
            s11 += y11;
        }
        more &= more << off;
    }
    // the previous run's sums (its last lane is head - 1), taken when `takes` says so
    const int prev = head > 0 ? head - 1 : 0;
    const float p01 = __shfl_sync(SG_FULL, s01, prev);
    const float p11 = __shfl_sync(SG_FULL, s11, prev);
    const bool tail = act && (lane == 31 || ((heads >> (lane + 1)) & 1u));
    if (tail)
    {
        const bool took = (takes >> head) & 1u;
        const bool given = lane < 31 && ((takes >> (lane + 1)) & 1u);
        const float a00 = took ? s00 + p01 : s00;
        const float a10 = took ? s10 + p11 : s10;
        float *q = buf + o;
        segsum_add_pair(q, a00, given ? 0.0f : s01);
        segsum_add_pair(q + su, a10, given ? 0.0f : s11);
    }
}
