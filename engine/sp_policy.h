/*
 * sp_policy: the eligibility gate. Every speculative tool launch — from a
 * window thread whose state is not verified, or from an action predictor —
 * asks sp_policy_gate() first. Policies are data loaded from Lua; the
 * decision and its accounting live here so no script can bypass them.
 *
 * A tool maps to a class; a class maps to a decision (full / warmup /
 * forbid), an optional rate limit and counters. An unlisted tool belongs to
 * the built-in class "unknown", whose decision is always forbid.
 */
#ifndef SP_POLICY_H
#define SP_POLICY_H
#include "sp_api.h"

#endif
