/* test_theory: the latency theory against the paper's worked examples and
   its own limits. Standalone; exits non-zero on any failure. */
#include "sp_theory.h"

#include <math.h>
#include <stdio.h>

typedef struct tcount {
  int run;     /* checks made */
  int failed;  /* checks that failed */
} tcount;

static void check(tcount *t, int ok, const char *what, double got, double want) {
  t->run++;
  if (!ok) {
    t->failed++;
    fprintf(stderr, "FAIL %s: got %.17g, want %.17g\n", what, got, want);
  }
}

static void near(tcount *t, const char *what, double got, double want, double tol) {
  check(t, fabs(got - want) <= tol, what, got, want);
}

static void test_worked_examples(tcount *t) {
  /* Appendix B, "Practical Examples": nu = 0.4, eps = 0.05. */
  near(t, "k_det(0.2,0.15)", sp_theory_k_det(0.2, 0.15), 3.28, 0.01);
  near(t, "k_eps(0.2,0.15)", sp_theory_k_eps(0.2, 0.15, 0.4, 0.05), 6, 0);
  near(t, "k_det(0.3,0.75)", sp_theory_k_det(0.3, 0.75), 1.67, 0.01);
  near(t, "k_eps(0.3,0.75)", sp_theory_k_eps(0.3, 0.75, 0.4, 0.05), 3, 0);
  /* k*_eps really does bound P_starve by eps (Theorem 4 and Corollary 5). */
  check(t, sp_theory_p_starve(6, 0.2, 0.15, 0.4) <= 0.05, "p_starve(6) <= 0.05",
        sp_theory_p_starve(6, 0.2, 0.15, 0.4), 0.05);
  check(t, sp_theory_p_starve(3, 0.3, 0.75, 0.4) <= 0.05, "p_starve(3) <= 0.05",
        sp_theory_p_starve(3, 0.3, 0.75, 0.4), 0.05);
  /* Table 1, Web Search + GPT-4o on 2Wiki: p .68, alpha .19, beta .10 -> .50. */
  near(t, "rel_lat_star table 1", sp_theory_rel_lat_star(0.68, 0.19, 0.10), 0.50, 0.005);
  near(t, "rel_lat_star table 1 row 1", sp_theory_rel_lat_star(0.27, 0.30, 0.74), 0.89, 0.005);
}

static void test_rel_lat_k(tcount *t) {
  const double ps[] = {0, 0.1, 0.5, 0.9, 0.999, 1};
  const double ab[][2] = {{0.2, 0.15}, {0.3, 0.75}, {0.05, 0.1}, {0.9, 2.0}};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    for (size_t j = 0; j < sizeof ab / sizeof ab[0]; j++) {
      double p = ps[i], a = ab[j][0], b = ab[j][1];
      double star = sp_theory_rel_lat_star(p, a, b);
      near(t, "rel_lat_k(k=1) == 1", sp_theory_rel_lat_k(p, a, b, 1), 1.0, 1e-12);
      double prev = 1.0;
      for (int k = 2; k <= 64; k++) {
        double r = sp_theory_rel_lat_k(p, a, b, k);
        check(t, r <= prev + 1e-15, "rel_lat_k non-increasing in k", r, prev);
        check(t, r >= star - 1e-12, "rel_lat_k >= rel_lat_star", r, star);
        prev = r;
      }
      near(t, "rel_lat_k(inf) == star", sp_theory_rel_lat_k(p, a, b, INFINITY), star, 0);
      near(t, "rel_lat_k(-1) == star", sp_theory_rel_lat_k(p, a, b, -1), star, 0);
      if (p < 1) near(t, "rel_lat_k(1e6) -> star", sp_theory_rel_lat_k(p, a, b, 1e6), star, 1e-9);
      else near(t, "rel_lat_k(p=1, 1e9) -> star", sp_theory_rel_lat_k(p, a, b, 1e9), star, 1e-8);
    }
  }
  /* p = 1: mu_k = k, so RelLat_k = (beta + alpha + (1 - alpha)/k)/(1 + beta). */
  near(t, "rel_lat_k p=1", sp_theory_rel_lat_k(1, 0.2, 0.15, 4), (0.15 + 0.2 + 0.8 / 4) / 1.15, 1e-15);
  /* p just below 1 is continuous with p = 1. */
  near(t, "rel_lat_k p->1", sp_theory_rel_lat_k(1 - 1e-12, 0.2, 0.15, 4),
       sp_theory_rel_lat_k(1, 0.2, 0.15, 4), 1e-9);
  /* The paper's closed form, Corollary 3, at a generic point. */
  double p = 0.6, a = 0.25, b = 0.4, k = 3;
  double mu = (1 - pow(p, k)) / (1 - p);
  near(t, "rel_lat_k closed form", sp_theory_rel_lat_k(p, a, b, k), (b + a + (1 - a) / mu) / (1 + b), 1e-14);
  check(t, isnan(sp_theory_rel_lat_k(1.5, 0.2, 0.1, 2)), "rel_lat_k(p>1) is NaN", 0, NAN);
  check(t, isnan(sp_theory_rel_lat_k(0.5, 0.2, 0.1, 0.5)), "rel_lat_k(k<1) is NaN", 0, NAN);
}

static void test_starve(tcount *t) {
  const double ab[][2] = {{0.2, 0.15}, {0.3, 0.75}, {0.05, 0.1}, {0.5, 0.5}, {0.01, 0.02}};
  for (size_t j = 0; j < sizeof ab / sizeof ab[0]; j++) {
    double a = ab[j][0], b = ab[j][1];
    double kc = ceil(sp_theory_k_det(a, b));
    double ps = sp_theory_p_starve(kc, a, b, 0.4);
    check(t, ps <= 0.5, "p_starve(ceil(k_det)) <= 0.5", ps, 0.5);
    double prev = 1.0;
    for (int k = 1; k <= 40; k++) {
      double s = sp_theory_p_starve(k, a, b, 0.4);
      check(t, s <= prev + 1e-15, "p_starve non-increasing in k", s, prev);
      prev = s;
    }
    int ke = sp_theory_k_eps(a, b, 0.4, 0.05);
    check(t, ke >= kc, "k_eps >= ceil(k_det)", ke, kc);
    check(t, sp_theory_k_eps(a, b, 0, 0.05) == (int)kc, "k_eps(nu=0) == ceil(k_det)",
          sp_theory_k_eps(a, b, 0, 0.05), kc);
  }
  near(t, "p_starve(inf)", sp_theory_p_starve(INFINITY, 0.2, 0.15, 0.4), 0, 0);
  near(t, "p_starve nu=0 below k_det", sp_theory_p_starve(2, 0.2, 0.15, 0), 1, 0);
  near(t, "p_starve nu=0 above k_det", sp_theory_p_starve(4, 0.2, 0.15, 0), 0, 0);
  near(t, "k_eps floor is 1", sp_theory_k_eps(5, 5, 0.1, 0.4), 1, 0);
  near(t, "k_eps bad eps", sp_theory_k_eps(0.2, 0.15, 0.4, 0), 0, 0);
  near(t, "k_eps unbounded", sp_theory_k_eps(0, 0, 0.4, 0.05), -1, 0);
}

static void test_z(tcount *t) {
  near(t, "z(0.95)", sp_theory_z(0.95), 1.6448536269514722, 1e-12);
  near(t, "z(0.975)", sp_theory_z(0.975), 1.959963984540054, 1e-12);
  near(t, "z(0.999)", sp_theory_z(0.999), 3.090232306167813, 1e-12);
  near(t, "z(0.8)", sp_theory_z(0.8), 0.8416212335729143, 1e-12);
  near(t, "z(1e-10)", sp_theory_z(1e-10), -6.361340902404056, 1e-9);
  near(t, "z(0.5)", sp_theory_z(0.5), 0.0, 0);
  check(t, isinf(sp_theory_z(0)) && sp_theory_z(0) < 0, "z(0) = -inf", sp_theory_z(0), -INFINITY);
  check(t, isinf(sp_theory_z(1)) && sp_theory_z(1) > 0, "z(1) = +inf", sp_theory_z(1), INFINITY);
  check(t, isnan(sp_theory_z(-0.1)) && isnan(sp_theory_z(1.1)) && isnan(sp_theory_z(NAN)),
        "z outside [0,1] is NaN", 0, NAN);
  /* Symmetry, and Phi(z(q)) == q, across the centre/tail boundaries. */
  for (int i = 1; i < 2000; i++) {
    double q = i / 2000.0;
    near(t, "z symmetry", sp_theory_z(q), -sp_theory_z(1 - q), 1e-12);
    double back = 0.5 * erfc(-sp_theory_z(q) / sqrt(2.0));
    near(t, "Phi(z(q)) == q", back, q, 1e-14);
  }
  for (double q = 1e-300; q < 0.03; q *= 3.7) {
    double z = sp_theory_z(q);
    double back = 0.5 * erfc(-z / sqrt(2.0));
    near(t, "Phi(z(q)) == q, tail (relative)", back / q, 1.0, 1e-12);
  }
}

int main(void) {
  tcount t = {0, 0};
  test_worked_examples(&t);
  test_rel_lat_k(&t);
  test_starve(&t);
  test_z(&t);
  printf("test_theory: %d checks, %d failed\n", t.run, t.failed);
  return t.failed ? 1 : 0;
}
