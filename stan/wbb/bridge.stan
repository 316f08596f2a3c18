// Bayesian bridge regression (Polson, Scott and Windle 2014) with a Gaussian
// likelihood:
//   y ~ normal(a + X * beta, sigma),
//   p(beta_j | tau) proportional to exp(-|beta_j / tau|^bridge_alpha),
//   nu = tau^(-bridge_alpha) ~ gamma(nu_shape, nu_rate),
//   sigma ~ half-student_t(3, 0, sigma_scale), a ~ normal(0, a_scale).
// The prior's cusp at 0 (infinite gradient for bridge_alpha < 1) would stall
// NUTS, so beta is written as the scale mixture of uniforms of Polson, Scott
// and Windle: exp(-|x|^alpha) / (2 Gamma(1 + 1 / alpha)) is the density of
// x = omega^(1 / alpha) z with omega ~ gamma(1 + 1 / alpha, 1) and
// z ~ uniform(-1, 1); then beta_j = tau x_j. Every density here is smooth.
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> bridge_alpha;
  real<lower=0> nu_shape;
  real<lower=0> nu_rate;
  real<lower=0> sigma_scale;
  real<lower=0> a_scale;
}
parameters {
  real a;
  vector<lower=0>[K] omega;
  vector<lower=-1, upper=1>[K] z;
  real<lower=0> nu;
  real<lower=0> sigma;
}
transformed parameters {
  real tau = pow(nu, -1 / bridge_alpha);
  vector[K] beta = tau * pow(omega, 1 / bridge_alpha) .* z;
}
model {
  omega ~ gamma(1 + 1 / bridge_alpha, 1);
  nu ~ gamma(nu_shape, nu_rate);
  sigma ~ student_t(3, 0, sigma_scale);
  a ~ normal(0, a_scale);
  y ~ normal_id_glm(X, a, beta, sigma);
}

