/*
 * A Kafka cluster for the tests: librdkafka's mock cluster (the one librdkafka tests itself against),
 * one broker on loopback. Prints its bootstrap address, then reads one command a line on stdin and
 * answers `ok` (or `error ...`) on stdout:
 *   topic <name> <partitions>     create a topic
 *   down | up                     take the broker down (connections closed and refused) or back up
 *   produce-errors <code> <count> the next <count> Produce requests fail with that Kafka error code
 * The cluster stops at the end of stdin.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BROKER_ID 1

int main(void) {
  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof errstr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    fprintf(stderr, "rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t *cluster = rd_kafka_mock_cluster_new(rk, 1);
  if (!cluster) {
    fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
    return 1;
  }
  printf("%s\n", rd_kafka_mock_cluster_bootstraps(cluster));
  fflush(stdout);

  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    char name[512];
    int a, b;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (sscanf(line, "topic %511s %d", name, &a) == 2) {
      err = rd_kafka_mock_topic_create(cluster, name, a, 1);
    } else if (strcmp(line, "down\n") == 0) {
      err = rd_kafka_mock_broker_set_down(cluster, BROKER_ID);
    } else if (strcmp(line, "up\n") == 0) {
      err = rd_kafka_mock_broker_set_up(cluster, BROKER_ID);
    } else if (sscanf(line, "produce-errors %d %d", &a, &b) == 2) {
      for (int i = 0; i < b; i++) rd_kafka_mock_push_request_errors(cluster, 0 /* Produce */, 1, (rd_kafka_resp_err_t)a);
    } else {
      printf("error unknown command\n");
      fflush(stdout);
      continue;
    }
    if (err) printf("error %s\n", rd_kafka_err2str(err));
    else printf("ok\n");
    fflush(stdout);
  }
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(rk);
  return 0;
}
