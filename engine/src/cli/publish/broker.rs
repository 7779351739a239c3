//! The broker side of `publish`: one AMQP 0.9.1 connection (lapin) with one channel in
//! confirm mode, the exchange declared (durable, topic), and messages published in order,
//! each persistent and named by its position (`message_id`), their confirms awaited as a
//! batch.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

/// Why the broker did not take a batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The connection or channel failed (the broker restarted, the network broke): connect
    /// again and publish from the last confirmed position.
    #[error("the broker connection failed: {0}")]
    Lost(#[from] lapin::Error),
    /// The broker refused a message (a nack): publish from the last confirmed position.
    #[error("the broker did not take message {message_id} (nack)")]
    Nacked {
        /// The message's position.
        message_id: String,
    },
}

/// One message: its position and its JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `ENTRY` (one message per entry) or `ENTRY.POSITION` (per command; `ENTRY.upgrade` for
    /// an upgrade line).
    pub message_id: String,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// A connected channel in confirm mode, publishing to one exchange.
pub struct Broker {
    _connection: Connection,
    channel: Channel,
    exchange: String,
    routing_key: String,
}

impl Broker {
    /// Connects to `url`, declares `exchange` (durable, topic; an existing one of another
    /// kind is an error from the broker) and turns publisher confirms on.
    pub async fn connect(
        url: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<Broker, BrokerError> {
        let connection = Connection::connect(url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Topic,
                durable,
                FieldTable::default(),
            )
            .await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Broker {
            _connection: connection,
            channel,
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        })
    }

    /// Publishes `messages` in order and waits until the broker confirmed every one.
    pub async fn publish(&self, messages: &[Message]) -> Result<(), BrokerError> {
        let mut confirms = Vec::with_capacity(messages.len());
        for message in messages {
            let properties = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_delivery_mode(PERSISTENT)
                .with_message_id(message.message_id.as_str().into());
            let confirm = self
                .channel
                .basic_publish(
                    self.exchange.as_str().into(),
                    self.routing_key.as_str().into(),
                    BasicPublishOptions::default(),
                    &message.body,
                    properties,
                )
                .await?;
            confirms.push(confirm);
        }
        for (confirm, message) in confirms.into_iter().zip(messages) {
            if !confirm.await?.is_ack() {
                let message_id = message.message_id.clone();
                return Err(BrokerError::Nacked { message_id });
            }
        }
        Ok(())
    }
}

/// AMQP's delivery mode of a message the broker keeps on disk.
const PERSISTENT: u8 = 2;
