# Sourced by the launch scripts (tests/launch, perf/testbed.sh): listen_port prints a random TCP
# port below the kernel's ephemeral range, for a PRIOCCL_COMM_ID or MASTER_PORT to listen at.
# Inside that range (32768-60999 here) the port can already be some other socket's local end,
# every outgoing connection taking one: CI once failed a launch test with "cannot listen at
# 127.0.0.1:49890: Address already in use".
listen_port() {
  local low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 12000)) || low=32768
  echo $((10000 + RANDOM % (low - 10000)))
}
