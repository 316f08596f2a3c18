// A normal linear regression with known sd as a power posterior (loss program),
// with the conjugate prior beta ~ N(0, (sigma * prior_scale)^2 I): SafeBayes'
// sequential scores are closed forms (stanflow.gibbs.safebayes).
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> sigma;
  real<lower=0> prior_scale;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  vector[K] beta;
}
model {
  vector[N] mu = X * beta;
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = normal_lpdf(y[i] | mu[i], sigma);
  }
  target += omega * dot_product(weights, log_lik);
  target += normal_lpdf(beta | 0, sigma * prior_scale);
}
