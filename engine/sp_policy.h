/*
 * sp_policy: the eligibility gate. Every speculative tool launch — from a
 * window thread whose state is not verified, or from an action predictor —
 * asks sp_policy_gate() first. Policies are data loaded from Lua; the
 * decision and its accounting live here so no script can bypass them.
 *
 * A tool maps to a class; a class maps to a decision (full / warmup /
 * forbid), an optional rate limit and counters. An unlisted tool belongs to
 * the built-in class "unknown", whose decision is always forbid.
 *
 * A policy with a script (a function, or a class table's `decide`) is
 * "scripted": the adapter computes the script's decision for each exact
 * call (tool, args, ctx) and passes it as the hint; the gate applies the
 * lower of it and the class decision. It fails closed: a launch of a
 * scripted policy without a decision, or whose script raised or returned
 * a non-decision (SP_HINT_ERROR), is forbid and counted (by_script).
 * Every call site (sp_window.c, sp_window_actspec.c) names its trigger
 * (SP_TRIG_*), and the decisions are counted per tool and per trigger.
 */
#ifndef SP_POLICY_H
#define SP_POLICY_H
#include "sp_api.h"

#endif
