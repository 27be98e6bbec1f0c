/* The cycle's floor (ilp_cycle_floor, lib/plan/ilp_form.c): the least largest stage time of
 * any cut of the blocks into at most N contiguous stages, which the MILP takes as the cycle's
 * lower bound on servers with many slots. Checked against every cut, enumerated here, on
 * 20,000 random instances (up to 12 blocks of random, equal or zero times, 1 to 9 stages), and
 * on a hand-worked one. The floor must never pass the best cut (it would cut off plans) and must
 * reach it within rounding (else it is weaker than it says). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/plan/ilp_internal.h"

/* Every subset of the B - 1 cut points with at most N - 1 cuts: the least largest stage. */
static double best_cut(const double *t, int B, int N)
{
    double best = INFINITY;
    for (unsigned mask = 0; mask < (1u << (B - 1)); mask++) {
        if (__builtin_popcount(mask) > N - 1)
            continue;
        double run = 0, worst = 0;
        for (int b = 0; b < B; b++) {
            run += t[b];
            if (b == B - 1 || (mask >> b & 1u)) {
                worst = fmax(worst, run);
                run = 0;
            }
        }
        best = fmin(best, worst);
    }
    return best;
}

static double floor_of(const double *t, int B, int N)
{
    struct block blk[16];
    memset(blk, 0, sizeof(blk));
    for (int b = 0; b < B; b++)
        blk[b].t = t[b];
    struct inst in;
    memset(&in, 0, sizeof(in));
    in.N = N, in.B = B, in.blk = blk;
    return ilp_cycle_floor(&in);
}

static unsigned long long lcg = 88172645463325252ull;
static double uniform(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) / 9007199254740992.0;
}

int main(void)
{
    /* By hand: 3, 1, 4, 1, 5 into two stages: {3, 1, 4} {1, 5} = 8 (the next best, {3, 1}
     * {4, 1, 5}, is 10); into three: {3, 1} {4, 1} {5} = 5; into one: 14. */
    const double hand[] = {3, 1, 4, 1, 5};
    double f2 = floor_of(hand, 5, 2), f3 = floor_of(hand, 5, 3), f1 = floor_of(hand, 5, 1);
    CHECK_MSG(f2 <= 8 && f2 >= 8 * (1 - 1e-8), "two stages: %.12g, expected 8", f2);
    CHECK_MSG(f3 <= 5 && f3 >= 5 * (1 - 1e-8), "three stages: %.12g, expected 5", f3);
    CHECK_MSG(f1 <= 14 && f1 >= 14 * (1 - 1e-8), "one stage: %.12g, expected 14", f1);
    int bad = 0;
    for (int i = 0; i < 20000 && bad < 5; i++) {
        int B = 1 + (int)(uniform() * 12), N = 1 + (int)(uniform() * 9);
        double t[16];
        int kind = i % 4;
        for (int b = 0; b < B; b++)
            t[b] = kind == 0   ? 0.5             /* equal: a transformer's layers */
                   : kind == 1 ? (uniform() < 0.3 ? 0 : uniform()) /* zero-time blocks */
                               : uniform() * (kind == 2 ? 1 : 1e-5);
        double ref = best_cut(t, B, N), got = floor_of(t, B, N);
        int ok = got <= ref && got >= ref * (1 - 1e-8);
        CHECK_MSG(ok, "instance %d (B %d, N %d): floor %.17g, best cut %.17g", i, B, N, got,
                  ref);
        bad += !ok;
    }
    return check_done();
}
