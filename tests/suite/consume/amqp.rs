//! The checks of `mod.rs` through RabbitMQ: a fanout exchange of its own
//! per test, and a queue per reader bound to it (declared before
//! publishing, so each reader gets every message); readers of one name
//! share its queue.

use futures_util::future::join_all;
use idem_tests::amqp_url;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use super::Broker;

struct Exchange {
    url: String,
    channel: Channel,
    _connection: Connection,
    name: String,
    readers: Vec<String>,
    runtime: tokio::runtime::Runtime,
}

impl Exchange {
    fn create(url: &str, test: &str, readers: &[&str]) -> Exchange {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let name = super::unique(test);
        let (connection, channel) = runtime.block_on(async {
            let connection = Connection::connect(url, ConnectionProperties::default())
                .await
                .expect("RabbitMQ is reachable");
            let channel = connection.create_channel().await.unwrap();
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            channel
                .exchange_declare(
                    name.as_str().into(),
                    ExchangeKind::Fanout,
                    ExchangeDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("declare the exchange");
            // Where --review-to forwards: a queue bound to nothing.
            channel
                .queue_declare(
                    format!("{name}.review").as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await
                .expect("declare the review queue");
            for reader in readers {
                let queue = format!("{name}.{reader}");
                // What the reader rejects without requeue goes to its
                // dead-letter queue, through the default exchange.
                let dead = format!("{queue}.dead");
                channel
                    .queue_declare(
                        dead.as_str().into(),
                        QueueDeclareOptions::durable(),
                        FieldTable::default(),
                    )
                    .await
                    .expect("declare the dead-letter queue");
                let mut arguments = FieldTable::default();
                arguments.insert(
                    "x-dead-letter-exchange".into(),
                    AMQPValue::LongString("".into()),
                );
                arguments.insert(
                    "x-dead-letter-routing-key".into(),
                    AMQPValue::LongString(dead.as_str().into()),
                );
                channel
                    .queue_declare(
                        queue.as_str().into(),
                        QueueDeclareOptions::durable(),
                        arguments,
                    )
                    .await
                    .expect("declare the queue");
                channel
                    .queue_bind(
                        queue.as_str().into(),
                        name.as_str().into(),
                        "".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .expect("bind the queue");
            }
            (connection, channel)
        });
        Exchange {
            url: url.to_string(),
            channel,
            _connection: connection,
            readers: readers.iter().map(|r| format!("{name}.{r}")).collect(),
            name,
            runtime,
        }
    }
}

impl Broker for Exchange {
    fn flags(&self, reader: &str) -> Vec<String> {
        let queue = format!("{}.{reader}", self.name);
        assert!(self.readers.contains(&queue), "{reader} was not declared");
        vec!["--from".into(), self.url.clone(), "--queue".into(), queue]
    }

    fn publish(&self, bodies: &[String]) {
        self.runtime.block_on(async {
            // Confirmed in windows of 100: each stored before the next window.
            for window in bodies.chunks(100) {
                let mut confirms = Vec::new();
                for body in window {
                    let confirm = self
                        .channel
                        .basic_publish(
                            self.name.as_str().into(),
                            "".into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            BasicProperties::default().with_delivery_mode(2),
                        )
                        .await
                        .expect("publish");
                    confirms.push(confirm);
                }
                for confirmed in join_all(confirms).await {
                    assert!(
                        confirmed.expect("confirmed").is_ack(),
                        "the broker stored it"
                    );
                }
            }
        });
    }

    fn unsettled(&self, reader: &str) -> u64 {
        // Once its consumers are gone, a queue's deliveries not acknowledged
        // are back in it: its message count is what is not settled.
        let queue = format!("{}.{reader}", self.name);
        self.runtime.block_on(async {
            let declared = self
                .channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("the queue exists");
            u64::from(declared.message_count())
        })
    }

    fn redeliver_soon(&self) -> Vec<String> {
        // A closed connection's deliveries go back at once.
        Vec::new()
    }

    fn review_to(&self) -> String {
        format!("{}.review", self.name)
    }

    fn refused(&self, reader: &str) -> Vec<String> {
        self.drain(&format!("{}.{reader}.dead", self.name), &[])
            .into_iter()
            .map(|(body, _)| body)
            .collect()
    }

    fn forwarded(&self, headers: &[&str]) -> Vec<(String, Vec<String>)> {
        self.drain(&self.review_to(), headers)
    }
}

impl Exchange {
    /// Takes every message from `queue`: each body and the value of each
    /// of `headers` (empty when absent).
    fn drain(&self, queue: &str, headers: &[&str]) -> Vec<(String, Vec<String>)> {
        self.runtime.block_on(async {
            let mut out = Vec::new();
            while let Some(got) = self
                .channel
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
            {
                let table = got
                    .delivery
                    .properties
                    .headers()
                    .clone()
                    .unwrap_or_default();
                let values = headers
                    .iter()
                    .map(|h| match table.inner().get(*h) {
                        Some(AMQPValue::LongString(v)) => v.to_string(),
                        _ => String::new(),
                    })
                    .collect();
                out.push((
                    String::from_utf8_lossy(&got.delivery.data).into_owned(),
                    values,
                ));
            }
            out
        })
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.runtime.block_on(async {
            let dead: Vec<String> = self.readers.iter().map(|r| format!("{r}.dead")).collect();
            for queue in self.readers.iter().chain(&dead).chain([&self.review_to()]) {
                let _ = self
                    .channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
            let _ = self
                .channel
                .exchange_delete(self.name.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        });
    }
}

#[test]
fn messages_published_and_delivered_again_run_each_effect_once() {
    let test = "consume::amqp::messages_published_and_delivered_again_run_each_effect_once";
    let Some(url) = amqp_url(test) else { return };
    super::messages_published_and_delivered_again_run_each_effect_once(&Exchange::create(
        &url,
        "dup",
        &["billing", "again"],
    ));
}

#[test]
fn a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review() {
    let test = "consume::amqp::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review";
    let Some(url) = amqp_url(test) else { return };
    super::a_consumer_killed_mid_effect_leaves_one_effect_and_its_message_goes_to_review(
        &Exchange::create(&url, "kill", &["billing"]),
    );
}

#[test]
fn two_consumers_one_killed_mid_run_the_other_takes_over() {
    let test = "consume::amqp::two_consumers_one_killed_mid_run_the_other_takes_over";
    let Some(url) = amqp_url(test) else { return };
    super::two_consumers_one_killed_mid_run_the_other_takes_over(&Exchange::create(
        &url,
        "two",
        &["billing"],
    ));
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_sqlite() {
    let test = "consume::amqp::poison_is_refused_once_beside_good_charges_on_sqlite";
    let Some(url) = amqp_url(test) else { return };
    super::poison::poison_is_refused_once_beside_good_charges(
        &Exchange::create(&url, "poison", &["billing"]),
        &idem_tests::TestStore::sqlite(),
    );
}

#[test]
fn poison_is_refused_once_beside_good_charges_on_postgres() {
    let test = "consume::amqp::poison_is_refused_once_beside_good_charges_on_postgres";
    let Some(url) = amqp_url(test) else { return };
    let Some(store) =
        idem_tests::postgres_url(test).map(|url| idem_tests::TestStore::postgres(&url))
    else {
        return;
    };
    super::poison::poison_is_refused_once_beside_good_charges(
        &Exchange::create(&url, "poison_pg", &["billing"]),
        &store,
    );
}

#[test]
fn the_run_flags_reach_the_records() {
    let test = "consume::amqp::the_run_flags_reach_the_records";
    let Some(url) = amqp_url(test) else { return };
    super::poison::the_run_flags_reach_the_records(&Exchange::create(&url, "run", &["billing"]));
}

#[test]
fn stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held() {
    let test =
        "consume::amqp::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held";
    let Some(url) = amqp_url(test) else { return };
    // A closed connection's deliveries go back at once.
    super::poison::stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held(
        &Exchange::create(&url, "crash", &["billing"]),
        &[],
    );
}

#[test]
fn a_file_and_a_broker_give_each_operation_the_same_end() {
    let test = "consume::amqp::a_file_and_a_broker_give_each_operation_the_same_end";
    let Some(url) = amqp_url(test) else { return };
    super::same_fate::a_file_and_a_broker_give_each_operation_the_same_end(&Exchange::create(
        &url,
        "same",
        &["same"],
    ));
}
