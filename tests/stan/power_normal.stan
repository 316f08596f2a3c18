// A power posterior of a normal mean with known sd and a normal prior, as a loss
// program: loss_i = -normal_lpdf(y[i] | theta, sigma). Its posterior and
// log Z(omega) are closed forms for every omega and weights (tests).
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> sigma;
  real prior_mean;
  real<lower=0> prior_sd;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real theta;
}
model {
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = normal_lpdf(y[i] | theta, sigma);
  }
  target += omega * dot_product(weights, log_lik);
  target += normal_lpdf(theta | prior_mean, prior_sd);
}
generated quantities {
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = normal_lpdf(y[i] | theta, sigma);
  }
}
