// Conjugate normal model: y_i ~ N(mu, sigma^2) with known sigma and a normal
// prior on mu, so the posterior of mu is normal in closed form.
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> sigma;
  real prior_mean;
  real<lower=0> prior_sd;
}
parameters {
  real mu;
}
model {
  mu ~ normal(prior_mean, prior_sd);
  y ~ normal(mu, sigma);
}
