// The key interval one query row sees under the masks of kernels/mask.py (key_ranges), for
// the MASKED builds of flash2_fwd.cu and flash2_bwd.cu: n query rows aligned to the end of nk
// keys, causal, a window of `left` keys before and `right` after the query's position (-1:
// none), packed segments given by their cumulative ends (n_segs = 0: one sequence).
#pragma once

struct KeyRange {
    int lo, hi;  // the keys lo..hi the query sees; hi < lo: none
};

// kernels/mask.py's key_ranges, for one query row
__device__ __forceinline__ KeyRange key_range(int row, int n, int nk, int causal, int left,
                                              int right, const int* seg_ends, int n_segs) {
    const int pos = row + nk - n;  // the query's position among the keys
    int lo = 0, hi = nk - 1;
    if (causal) hi = min(hi, pos);
    if (left >= 0) lo = max(lo, pos - left);
    if (right >= 0) hi = min(hi, pos + right);
    if (n_segs > 0) {  // the segment holding the row: the first end above it
        int a = 0, b = n_segs - 1;
        while (a < b) {
            const int mid = (a + b) / 2;
            if (seg_ends[mid] > row) b = mid; else a = mid + 1;
        }
        lo = max(lo, a ? seg_ends[a - 1] : 0);
        hi = min(hi, seg_ends[a] - 1);
    }
    return KeyRange{lo, hi};
}
