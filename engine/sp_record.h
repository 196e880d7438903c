/*
 * sp_record: pieces of a finished query's result record written as JSON
 * text by the engine (the "stats" object), byte for byte what the Lua
 * record's tables encode to, so a record written and dropped builds no
 * tables. Declared in sp_api.h (Lua calls it); depends on sp_buf, sp_json,
 * sp_est and sp_theory.
 */
#ifndef SP_RECORD_H
#define SP_RECORD_H
#include "sp_api.h"

#endif
