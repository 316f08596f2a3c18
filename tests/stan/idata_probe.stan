// Test program for tests/test_idata_e2e.py: a normal model whose generated
// quantities have known values and shapes (a matrix, a complex vector).
data {
  int<lower=1> N;
  vector[N] y;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, 10);
  sigma ~ lognormal(0, 1);
  y ~ normal(mu, sigma);
}
generated quantities {
  matrix[2, 3] m;
  for (i in 1 : 2) {
    for (j in 1 : 3) {
      m[i, j] = 10 * i + j;
    }
  }
  complex_vector[2] z = [to_complex(mu, sigma), to_complex(1, 2)]';
  vector[N] log_lik;
  array[N] real y_rep = normal_rng(rep_vector(mu, N), sigma);
  for (n in 1 : N) {
    log_lik[n] = normal_lpdf(y[n] | mu, sigma);
  }
}
