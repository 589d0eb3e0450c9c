// Work distribution of the warp-shuffle kernels (thesis, "Work distribution").
//
// The y-shifts of the output are cut into groups of SHIFTS consecutive shifts; group g starts
// at shift ky0 = shift_y0 + g * SHIFTS and needs the left rows of its "domain"
// [max(0, ky0), min(left_h, ky_last + right_h)).  A task is up to rows_per_worker consecutive
// rows of one domain; a worker is one warp row (every x-warp of the grid shares the worker id).
//
//   none       one worker per group, all rows of its domain, plain stores;
//   rectangle  max_tasks workers for every group (worker w: group w % n_groups, task
//              w / n_groups); workers past their group's task count exit at once; atomicAdd;
//   triangle   exactly one worker per task; the worker finds its (group, task) by solving the
//              quadratic of the cumulative task count on the piece of the task profile that
//              holds it, then corrects by the exact count; atomicAdd;
//   block      (ours) the warps of one block share a group's rows and add their sums in shared
//              memory, one plain store per output: warp_shuffle_block_xcorr, which needs none
//              of the arithmetic below.
//
// The host (xcorr_app/correlate/_work_distribution.py schedule(); its assign() ports this
// arithmetic for the CPU tests) describes the task profile as at most MAX_PIECES linear pieces:
// group g_start + i of a piece has a domain of alpha + beta * i rows
// (beta in {-SHIFTS, 0, SHIFTS}), i < length, and tasks_before tasks precede the piece.  Fields
// per piece, in this order:
#pragma once
#include "int_math.cuh"

namespace xcorr {

enum Distribution { DIST_NONE = 0, DIST_RECTANGLE = 1, DIST_TRIANGLE = 2, DIST_BLOCK = 3 };
enum PieceField { P_G_START = 0, P_LENGTH, P_ALPHA, P_BETA, P_TASKS_BEFORE, PIECE_FIELDS };

// sum_{i < n} floor((a * i + b) / m) for n, m > 0 and a, b >= 0 (Euclid-like, O(log)).
// 32-bit on purpose: 64-bit division and double sqrt are called subroutines that need a stack
// frame; every count here is below the number of workers (< 2^31).
__device__ __forceinline__ int floor_sum(int n, int m, int a, int b) {
    int ans = 0;
    while (true) {
        if (a >= m) { ans += (n - 1) * n / 2 * div_floor(a, m, a); }
        if (b >= m) { ans += n * div_floor(b, m, b); }
        const int y_max = a * n + b;
        if (y_max < m) break;
        n = div_floor(y_max, m, b);
        const int t = m; m = a; a = t;
    }
    return ans;
}

// Tasks of the first k groups of a piece: sum_{i < k} ceil((alpha + beta i) / rpw).
__device__ __forceinline__ int piece_tasks(int k, int alpha, int beta, int rpw) {
    if (k <= 0) return 0;
    if (beta == 0) return k * ceil_div(alpha, rpw);
    if (beta > 0) return floor_sum(k, rpw, beta, alpha + rpw - 1);
    return floor_sum(k, rpw, -beta, alpha + beta * (k - 1) + rpw - 1);
}

// Worker -> (group, task); false for a worker with nothing to do (it exits at once).
__device__ __forceinline__ bool assign_work(int dist, int worker, int n_groups, int rpw,
                                            int max_tasks, const int* __restrict__ pieces,
                                            int n_pieces, int& group, int& task) {
    if (dist == DIST_NONE) {
        group = worker;
        task = 0;
        return worker < n_groups;
    }
    if (dist == DIST_RECTANGLE) {
        task = div_floor(worker, n_groups, group);
        if (task >= max_tasks) return false;
        // The task count of this group is checked by the caller against the domain length.
        return true;
    }
    // Triangle: locate the piece (at most MAX_PIECES, scanned linearly).
    int p = n_pieces - 1;
    for (int i = 1; i < n_pieces; ++i) {
        if (worker < pieces[i * PIECE_FIELDS + P_TASKS_BEFORE]) { p = i - 1; break; }
    }
    const int* pc = pieces + p * PIECE_FIELDS;
    const int length = pc[P_LENGTH], alpha = pc[P_ALPHA], beta = pc[P_BETA];
    const int w = worker - pc[P_TASKS_BEFORE];
    // Continuous cumulative count F(k) ~ a k^2 + b k with a = beta / 2rpw and
    // b = alpha / rpw + 1/2 - beta / 2rpw; the root of F(k) = w in its stable form (float and
    // approximate hardware division and square root, which are not called subroutines: the
    // exact count below corrects the guess).
    const float a = __fdividef((float)beta, 2.0f * rpw);
    const float b = __fdividef((float)alpha, (float)rpw) + 0.5f - a;
    const float disc = fmaxf(b * b + 4.0f * a * (float)w, 0.0f);
    const float denom = b + (disc > 0.0f ? disc * rsqrtf(disc) : 0.0f);
    const float guess = denom > 0.0f ? __fdividef(2.0f * (float)w, denom) : 0.0f;
    int k = (int)fminf(fmaxf(guess, 0.0f), (float)(length - 1));
    while (k > 0 && piece_tasks(k, alpha, beta, rpw) > w) --k;
    while (k + 1 < length && piece_tasks(k + 1, alpha, beta, rpw) <= w) ++k;
    group = pc[P_G_START] + k;
    task = w - piece_tasks(k, alpha, beta, rpw);
    return true;
}

}  // namespace xcorr
