/* sp_opt: the domains of the numeric options that several entry points
   share (`specula theory`, `specula run`, --compare items, specula.run() and
   specula.theory in Lua). Every path parses and checks through these two
   functions, so a value one of them rejects no other one accepts. It also
   holds every option's default, once. */
#ifndef SP_OPT_H
#define SP_OPT_H
#include "sp_api.h"

/* Declared in sp_api.h (Lua calls them too):
   int sp_opt_parse(const char *name, const char *text, double *out, char *err, size_t errlen);
   int sp_opt_check(const char *name, double v, char *err, size_t errlen);
   double sp_opt_default(const char *name);
   const char *sp_opt_default_at(int i, double *value); */

#endif
