// The power posterior of tests/stan/power_normal.stan in three variants whose
// data cannot be cut by observation (tests/test_gibbs_slices.py): 1, the losses
// of y centred at its mean; 2, a prior whose scale grows with N; 3, a program
// that rejects fewer than two observations.
data {
  int<lower=1> N;
  vector[N] y;
  int<lower=1, upper=3> variant;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
transformed data {
  vector[N] z = variant == 1 ? y - mean(y) : y;
  real prior_sd = variant == 2 ? sqrt(N) : 3;
  if (variant == 3 && N < 2) {
    reject("N must be at least 2, got ", N);
  }
}
parameters {
  real theta;
}
model {
  target += omega * dot_product(weights, -0.5 * square(z - theta));
  target += normal_lpdf(theta | 0, prior_sd);
}
