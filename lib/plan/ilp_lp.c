/* The MILP's LP builder: columns and rows added to a GLPK problem one term at a time, with
 * repeated terms merged and cancelled ones dropped, so that the formulation (ilp_form.c) can
 * be written as its mathematics reads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

int ilp_col_new(struct model *m, const char *name, int kind, double lb, double ub, double obj)
{
    int j = glp_add_cols(m->lp, 1);
    glp_set_col_name(m->lp, j, name);
    glp_set_col_kind(m->lp, j, kind);
    if (kind == GLP_BV)
        ;
    else if (ub < 0)
        glp_set_col_bnds(m->lp, j, GLP_LO, lb, 0);
    else if (ub == lb)
        glp_set_col_bnds(m->lp, j, GLP_FX, lb, lb);
    else
        glp_set_col_bnds(m->lp, j, GLP_DB, lb, ub);
    glp_set_obj_coef(m->lp, j, obj);
    m->ncols = j;
    return j;
}

void ilp_row_begin(struct model *m)
{
    for (int i = 1; i <= m->r.n; i++)
        m->pos[m->r.ind[i]] = 0;
    m->r.n = 0;
    m->r.constant = 0;
}

void ilp_row_add(struct model *m, int col, double coef)
{
    if (coef == 0 || m->fail)
        return;
    if (col <= 0) { /* a fixed value folded into the constant by the caller */
        return;
    }
    if (col >= m->pos_cap) {
        int cap = m->pos_cap ? m->pos_cap : 1024;
        while (cap <= col)
            cap *= 2;
        int *np = realloc(m->pos, sizeof(int) * (size_t)cap);
        if (!np) {
            m->fail = 1;
            return;
        }
        memset(np + m->pos_cap, 0, sizeof(int) * (size_t)(cap - m->pos_cap));
        m->pos = np;
        m->pos_cap = cap;
    }
    if (m->pos[col]) {
        m->r.val[m->pos[col]] += coef;
        return;
    }
    if (m->r.n + 2 > m->r.cap) {
        int cap = m->r.cap ? 2 * m->r.cap : 256;
        int *ni = realloc(m->r.ind, sizeof(int) * (size_t)cap);
        if (ni)
            m->r.ind = ni;
        double *nv = realloc(m->r.val, sizeof(double) * (size_t)cap);
        if (nv)
            m->r.val = nv;
        if (!ni || !nv) {
            m->fail = 1;
            return;
        }
        m->r.cap = cap;
    }
    m->r.n++;
    m->r.ind[m->r.n] = col;
    m->r.val[m->r.n] = coef;
    m->pos[col] = m->r.n;
}

void ilp_row_end(struct model *m, const char *name, int type, double bound)
{
    if (m->fail)
        return;
    for (int i = 1; i <= m->r.n; i++)
        m->pos[m->r.ind[i]] = 0;
    /* Drop zero coefficients (merged terms can cancel). */
    int n = 0;
    for (int i = 1; i <= m->r.n; i++)
        if (fabs(m->r.val[i]) > 1e-12) { /* cancellation leaves dust: 1e-12 GB < 1 byte */
            n++;
            m->r.ind[n] = m->r.ind[i];
            m->r.val[n] = m->r.val[i];
        }
    m->r.n = n;
    if (n == 0) {
        m->r.n = 0;
        return; /* constant rows are checked by the caller where they matter */
    }
    int i = glp_add_rows(m->lp, 1);
    glp_set_row_name(m->lp, i, name);
    double b = bound - m->r.constant;
    glp_set_row_bnds(m->lp, i, type, type == GLP_UP ? 0 : b, type == GLP_UP ? b : 0);
    if (type == GLP_FX)
        glp_set_row_bnds(m->lp, i, GLP_FX, b, b);
    glp_set_mat_row(m->lp, i, n, m->r.ind, m->r.val);
    m->r.n = 0;
}

void ilp_name(char *buf, const char *fmt, int a, int b, int d)
{
    snprintf(buf, 64, fmt, a, b, d);
}

void ilp_model_finish(struct model *m)
{
    free(m->r.ind);
    free(m->r.val);
    free(m->pos);
    m->r.ind = m->pos = NULL;
    m->r.val = NULL;
}
