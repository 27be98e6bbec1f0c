/* The DGX-1 NVLink link counts exactly as NVIDIA's DGX-1 white paper draws them, written here
 * independently of lib/topo's table: double links on the ring 0-3-2-1-5-6-7-4-0, single links
 * on the pairs below, nothing elsewhere. */
#ifndef TESTS_TOPO_DGX1_EXPECTED_H
#define TESTS_TOPO_DGX1_EXPECTED_H

static int dgx1_expected(int i, int j)
{
    static const int ring[] = {0, 3, 2, 1, 5, 6, 7, 4};
    static const int singles[][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 6},
                                     {3, 7}, {4, 5}, {4, 6}, {5, 7}};
    for (int k = 0; k < 8; k++) {
        int a = ring[k], b = ring[(k + 1) % 8];
        if ((a == i && b == j) || (a == j && b == i))
            return 2;
    }
    for (int k = 0; k < 8; k++)
        if ((singles[k][0] == i && singles[k][1] == j) ||
            (singles[k][0] == j && singles[k][1] == i))
            return 1;
    return 0;
}

#endif
