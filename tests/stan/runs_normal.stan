// Conjugate normal model for the run-layer tests: y_i ~ N(mu, sigma^2) with
// known sigma and mu ~ N(0, 10^2), so the posterior of mu is normal in closed
// form. `spin` > 0 makes the run busy for about spin^2 additions before it
// starts (a hung run, for timeout tests); 0 costs nothing.
data {
  int<lower=0> N;
  vector[N] y;
  real<lower=0> sigma;
  int<lower=0> spin;
}
transformed data {
  real spun = 0;
  for (i in 1 : spin) {
    for (j in 1 : spin) {
      spun += 1;
    }
  }
  if (spun < 0) {
    reject("unreachable: keeps the loop above from being optimised away");
  }
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, sigma);
}

