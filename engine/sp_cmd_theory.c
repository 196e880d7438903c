/* `specula theory`: the latency theory at given p, alpha, beta (sp_theory.c)
   beside the event-level RelLat of the window itself on synthetic draws
   (sp_synth_model). The command line is read and checked in Lua
   (lua/specula/cmd/theory.lua); this prints the result. */
#include "sp_api.h"
#include "sp_synth.h"
#include "sp_theory.h"

#include <math.h>
#include <stdio.h>

/* k as text: an integer, or "inf". */
static void fmt_k(char *out, size_t n, double k) {
  if (isinf(k)) snprintf(out, n, "inf");
  else snprintf(out, n, "%.0f", k);
}

/* "key":number, — or null for an overflowed extreme input: JSON has no inf/nan. */
static void json_num(const char *key, double v) {
  if (isfinite(v)) printf("\"%s\":%.12g,", key, v);
  else printf("\"%s\":null,", key);
}

int sp_theory_print(const sp_theory_args *args) {
  sp_theory_args a = *args;

  int k_eps = sp_theory_k_eps(a.alpha, a.beta, a.nu, a.eps);
  double k = a.have_k ? a.k : (k_eps > 0 ? (double)k_eps : INFINITY);
  double star = sp_theory_rel_lat_star(a.p, a.alpha, a.beta);
  double rel_k = sp_theory_rel_lat_k(a.p, a.alpha, a.beta, k);
  double k_det = sp_theory_k_det(a.alpha, a.beta);
  double starve = sp_theory_p_starve(k, a.alpha, a.beta, a.nu);
  /* the event level: the window itself (as `specula replay` runs it) on
     synthetic draws at these p, alpha, beta, CV nu, 200 x 30 hops */
  double event = sp_synth_model(a.p, a.alpha, a.beta, a.nu, isinf(k) ? SP_K_UNBOUNDED : (int)k, "spechop", a.launch, 30,
                                 200, 1);
  const char *launch = a.launch == SP_REPLAY_SLOT ? "slot" : "eager";
  char ks[32], keps[32];
  fmt_k(ks, sizeof ks, k);
  fmt_k(keps, sizeof keps, k_eps > 0 ? (double)k_eps : INFINITY);

  if (a.json) {
    /* k and k_eps are numbers, or the string "inf" when unbounded. */
    printf("{\"p\":%.12g,\"alpha\":%.12g,\"beta\":%.12g,\"nu\":%.12g,\"eps\":%.12g,",
           a.p, a.alpha, a.beta, a.nu, a.eps);
    printf(isinf(k) ? "\"k\":\"%s\"," : "\"k\":%s,", ks);
    printf("\"k_from\":\"%s\",", a.have_k ? "arg" : "k_eps");
    json_num("rel_lat_star", star);
    json_num("rel_lat_k", rel_k);
    json_num("k_det", k_det);
    json_num("p_starve", starve);
    json_num("rel_lat_event", event);
    printf("\"spec_launch\":\"%s\",", launch);
    printf(k_eps > 0 ? "\"k_eps\":%s}\n" : "\"k_eps\":\"%s\"}\n", keps);
    return 0;
  }
  printf("p = %g   alpha = %g   beta = %g   nu = %g   eps = %g   k = %s%s\n\n",
         a.p, a.alpha, a.beta, a.nu, a.eps, ks, a.have_k ? "" : " (k*_eps)");
  printf("  %-13s %10s   %s\n", "quantity", "value", "meaning");
  printf("  %-13s %10.6f   %s\n", "rel_lat_star", star, "oracle relative latency (Cor. 1)");
  printf("  %-13s %10.6f   relative latency, window of k = %s (Cor. 3)\n", "rel_lat_k", rel_k, ks);
  printf("  %-13s %10.6f   (1+beta)/(alpha+beta) (Thm. 4)\n", "k_det", k_det);
  printf("  %-13s %10.6f   starvation bound at k = %s, nu = %g (Thm. 4)\n", "p_starve", starve, ks, a.nu);
  printf("  %-13s %10s   threads for p_starve <= %g (Cor. 5)\n", "k_eps", keps, a.eps);
  printf("  %-13s %10.6f   event-level schedule at k = %s, %s launch (200 x 30 hops, CV %g)\n",
         "rel_lat_event", event, ks, launch, a.nu);
  return 0;
}
