/*
 * plan.c — the spec as a chain of logical operators: every op's parameters
 * are parsed and its columns bound, so that errors name the spec field
 * ("ops[1].size: ...") and no name is looked up per sample afterwards.
 *
 * Rules checked here (docs/PIPELINE.md, "Op order"):
 *  - after `batch` only `prefetch`, `take` and `skip` (counting batches);
 *  - `repeat` at most once, with only per-sample ops before it;
 *  - at most one `batch`.
 */
#include "pipeline/plan.h"

#include <stdio.h>
#include <string.h>

int sl_plan__is_map_like(const sl_pnode *n) {
    return n->kind == SL_PN_OP || n->kind == SL_PN_MAP || n->kind == SL_PN_FILTER;
}

int sl_plan__is_seq(const sl_pnode *n) {
    return n->kind == SL_PN_SHUFFLE_BUFFER || n->kind == SL_PN_TAKE || n->kind == SL_PN_SKIP;
}

static const char *const structural[] = {"batch", "prefetch", "shuffle_buffer", "take",
                                         "skip",  "repeat",   "map",            NULL};

static int unknown_op(const char *name, const char *field) {
    const char *names[160];
    int n = 0;
    for (int i = 0; structural[i] && n < 160; i++)
        names[n++] = structural[i];
    for (int i = 0; sl_op_at(i) && n < 160; i++)
        names[n++] = sl_op_at(i)->name;
    char list[512];
    sl__names_closest(name, names, n, list, sizeof list);
    return sl__error(SL_EINVAL, "%s.op: unknown op '%s' (known: %s)", field, name, list);
}

int sl_plan__check_op_name(const char *name, const char *field) {
    for (int i = 0; structural[i]; i++)
        if (!strcmp(name, structural[i]))
            return SL_OK;
    return sl_op_lookup(name) ? SL_OK : unknown_op(name, field);
}

static void forget_shapes(sl_colset *cols) {
    for (int i = 0; i < cols->ncols; i++) {
        cols->col[i].dtype = SL_DTYPE_INVALID;
        cols->col[i].ndim = -1;
        cols->col[i].encoded = 0;
        cols->col[i].index_column = 0;
        cols->col[i].text = 0; /* a user map may have replaced it */
    }
}

/* A column an op's bind rewrote (another dtype, shape or encoding) no longer
 * holds the source's text: clear `text` there, keep it where the column is as
 * it was (ops on other columns, select). */
static void keep_text_where_unchanged(const sl_colset *before, sl_colset *after) {
    for (int i = 0; i < after->ncols; i++) {
        sl_colinfo *a = &after->col[i];
        if (!a->text)
            continue;
        const sl_colinfo *b = NULL;
        for (int j = 0; j < before->ncols && !b; j++)
            if (!strcmp(before->col[j].name, a->name))
                b = &before->col[j];
        int same = b && b->text && b->dtype == a->dtype && b->ndim == a->ndim &&
                   b->encoded == a->encoded;
        for (int d = 0; same && d < a->ndim; d++)
            same = b->shape[d] == a->shape[d];
        if (!same)
            a->text = 0;
    }
}

static int parse_structural(sl_pnode *nd, const char *name, const cJSON *j, const char *field);

int sl_plan__check_op(const cJSON *j, const char *field) {
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "op");
    if (!cJSON_IsObject(j))
        return sl__error(SL_EINVAL, "%s: must be an object", field);
    if (!cJSON_IsString(op) || !op->valuestring[0])
        return sl__error(SL_EINVAL, "%s.op: missing (must name the op, e.g. \"batch\")", field);
    sl_pnode nd;
    memset(&nd, 0, sizeof nd);
    SL_TRY(sl_spec__parse_parallel(cJSON_GetObjectItemCaseSensitive(j, "parallel"), field,
                                   &nd.parallel));
    int rc = parse_structural(&nd, op->valuestring, j, field);
    if (rc <= 0)
        return rc;
    const sl_op_def *def = sl_op_lookup(op->valuestring);
    if (!def)
        return unknown_op(op->valuestring, field);
    void *params = sl__calloc(1, def->params_size ? def->params_size : 1);
    if (!params)
        return sl__oom("checking op parameters");
    rc = def->parse(params, j, field);
    if (def->params_free)
        def->params_free(params);
    sl__free(params);
    return rc;
}

/* The structural nodes that take one whole number: its key and bounds. */
typedef struct {
    const char *name, *key;
    int required;
    int64_t def, min, max;
    int kind;
} int_node;

static const int_node int_nodes[] = {
    {"prefetch", "depth", 0, 2, 1, 1024, SL_PN_PREFETCH},
    {"shuffle_buffer", "size", 1, 0, 1, 1 << 24, SL_PN_SHUFFLE_BUFFER},
    {"take", "count", 1, 0, 0, INT64_MAX, SL_PN_TAKE},
    {"skip", "count", 1, 0, 0, INT64_MAX, SL_PN_SKIP},
    {"repeat", "count", 1, 0, 1, 1 << 20, SL_PN_REPEAT},
};

static const int_node *int_node_named(const char *name) {
    for (size_t i = 0; i < sizeof int_nodes / sizeof int_nodes[0]; i++)
        if (!strcmp(name, int_nodes[i].name))
            return &int_nodes[i];
    return NULL;
}

static int parse_structural(sl_pnode *nd, const char *name, const cJSON *j, const char *field) {
    const int_node *in;
    if (!strcmp(name, "batch")) {
        static const char *const k[] = {"size", "drop_remainder", NULL};
        SL_TRY(sl_op_param_check_keys(j, field, k));
        SL_TRY(sl_op_param_int(j, "size", field, 1, 0, 1, INT64_MAX, &nd->n));
        if (nd->n > (1 << 24))
            return sl__error(SL_EINVAL, "%s.size: must be at most %d", field, 1 << 24);
        SL_TRY(sl_op_param_bool(j, "drop_remainder", field, 0, 0, &nd->flag));
        nd->kind = SL_PN_BATCH;
        snprintf(nd->desc, sizeof nd->desc, "size=%lld%s", (long long)nd->n,
                 nd->flag ? " drop_remainder" : "");
    } else if ((in = int_node_named(name))) {
        const char *const k[] = {in->key, NULL};
        SL_TRY(sl_op_param_check_keys(j, field, k));
        SL_TRY(sl_op_param_int(j, in->key, field, in->required, in->def, in->min, in->max,
                               &nd->n));
        nd->kind = in->kind;
        snprintf(nd->desc, sizeof nd->desc, "%s=%lld", in->key, (long long)nd->n);
    } else if (!strcmp(name, "map")) {
        return sl__error(SL_EINVAL, "%s.op: \"map\" runs a C function: add it with "
                                    "sl_spec_add_map(), not from JSON", field);
    } else {
        return 1; /* not structural */
    }
    snprintf(nd->label, sizeof nd->label, "%s", name);
    return SL_OK;
}

int sl_plan__build(sl_plan *plan, const sl_spec *spec, const sl_colset *src_cols,
                   const sl_pnode *lead) {
    memset(plan, 0, sizeof *plan);
    plan->src_cols = *src_cols;
    plan->repeat = 1;
    plan->out_depth = 2;
    if (lead) {
        plan->lead = *lead;
        plan->has_lead = 1;
    }
    plan->nodes = sl__calloc((size_t)spec->nops + 1, sizeof *plan->nodes);
    if (!plan->nodes)
        return sl__oom("building a plan");
    sl_colset cols = lead ? lead->cols : *src_cols;
    int seen_batch = 0, seen_seq = 0, seen_repeat = 0;
    for (int i = 0; i < spec->nops; i++) {
        const sl_spec_op *o = &spec->ops[i];
        sl_pnode *nd = &plan->nodes[plan->nnodes++];
        char field[32];
        snprintf(field, sizeof field, "ops[%d]", i);
        nd->pos = i;
        nd->nparts = 1;
        nd->parts[0] = (uint32_t)i;
        if (o->kind == SL_SPEC_OP_MAP || o->kind == SL_SPEC_OP_FILTER) {
            nd->kind = o->kind == SL_SPEC_OP_MAP ? SL_PN_MAP : SL_PN_FILTER;
            nd->map = o->map;
            nd->batch_map = o->batch_map;
            nd->filter = o->filter;
            nd->user = o->user;
            snprintf(nd->label, sizeof nd->label, "%s '%s'",
                     o->kind == SL_SPEC_OP_MAP ? "map" : "filter_fn", o->name);
            if (nd->kind == SL_PN_MAP)
                forget_shapes(&cols);
        } else {
            const cJSON *j = o->json;
            const char *name = cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring;
            SL_TRY(sl_spec__parse_parallel(cJSON_GetObjectItemCaseSensitive(j, "parallel"), field,
                                           &nd->parallel));
            int rc = parse_structural(nd, name, j, field);
            if (rc < 0)
                return rc;
            if (rc > 0) {
                const sl_op_def *def = sl_op_lookup(name);
                if (!def)
                    return unknown_op(name, field);
                nd->kind = SL_PN_OP;
                nd->def = def;
                snprintf(nd->label, sizeof nd->label, "%s", def->name);
                nd->params = sl__calloc(1, def->params_size ? def->params_size : 1);
                if (!nd->params)
                    return sl__oom("parsing op parameters");
                SL_TRY(def->parse(nd->params, j, field));
                sl_colset before = cols;
                SL_TRY(def->bind(nd->params, &cols, field));
                keep_text_where_unchanged(&before, &cols);
                if (def->describe)
                    def->describe(nd->params, nd->desc, sizeof nd->desc);
            }
        }
        /* order rules */
        if (seen_batch && nd->kind != SL_PN_PREFETCH && nd->kind != SL_PN_TAKE &&
            nd->kind != SL_PN_SKIP)
            return sl__error(SL_EINVAL, "%s: '%s' after batch is not supported (only prefetch, "
                                        "take and skip may follow batch)", field, nd->label);
        if (nd->kind == SL_PN_REPEAT) {
            if (seen_repeat)
                return sl__error(SL_EINVAL, "%s: repeat given twice", field);
            if (seen_seq || seen_batch)
                return sl__error(SL_EINVAL, "%s: repeat must come before shuffle_buffer, take, "
                                            "skip and batch", field);
            seen_repeat = 1;
            plan->repeat = nd->n;
        }
        if (sl_plan__is_seq(nd))
            seen_seq = 1;
        if (nd->kind == SL_PN_BATCH) {
            seen_batch = 1;
            plan->has_batch = 1;
            plan->batch_size = nd->n;
            plan->drop_remainder = nd->flag;
        }
        if ((nd->kind == SL_PN_TAKE || nd->kind == SL_PN_SKIP) && seen_batch)
            nd->after_batch = 1;
        nd->cols = cols;
    }
    plan->out_cols = cols;
    return SL_OK;
}

void sl_plan__free(sl_plan *plan) {
    if (plan->has_lead && plan->lead.params) {
        if (plan->lead.def->params_free)
            plan->lead.def->params_free(plan->lead.params);
        sl__free(plan->lead.params);
    }
    for (int i = 0; i < plan->nnodes; i++) {
        sl_pnode *nd = &plan->nodes[i];
        if (nd->params) {
            if (nd->def && nd->def->params_free)
                nd->def->params_free(nd->params);
            sl__free(nd->params);
        }
    }
    /* fused nodes own their params; the others point into plan->nodes */
    for (int i = 0; i < plan->nopt; i++) {
        sl_pnode *nd = &plan->opt[i];
        if (nd->nparts > 1 && nd->params) {
            if (nd->def && nd->def->params_free)
                nd->def->params_free(nd->params);
            sl__free(nd->params);
        }
    }
    sl__free(plan->nodes);
    sl__free(plan->opt);
    memset(plan, 0, sizeof *plan);
}
