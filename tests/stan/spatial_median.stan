// The spatial median of points in the plane as a loss program:
// loss_i = ||x[i] - theta||_2, prior N(0, 10^2) per coordinate.
data {
  int<lower=1> N;
  array[N] vector[2] x;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  vector[2] theta;
}
model {
  vector[N] loss;
  for (i in 1 : N) {
    loss[i] = distance(x[i], theta);
  }
  target += -omega * dot_product(weights, loss);
  target += normal_lpdf(theta | 0, 10);
}
