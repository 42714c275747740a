"""The --secure mode of the exactly-once checks: a SASL_SSL listener, Kafka's
StandardAuthorizer, a SCRAM user for the client under test and exactly the
ACLs it needs. Used by conformance/clients/eos/runner.py and the Streams,
Spring and Flink checks, against doze or Kafka alike (brokers.py).

    from secure import Security
    sec = Security(directory)              # a throwaway CA and certificate (certs.py)
    broker = Doze(directory, sec.settings)  # or Kafka(...): the same settings
    broker.start()
    sec.add_user(broker.bootstrap)          # the SCRAM user, made by the super user
    sec.grant(broker.bootstrap, [("TOPIC", "in", "LITERAL", "READ"), ...])
    env.update(sec.env)                     # how the client under test connects
    client_bootstrap = broker.bootstraps["SASL_SSL"]

The runner's own clients (setup, progress, verification) stay on PLAINTEXT,
whose User:ANONYMOUS is the only super user. The client under test reads
EOS_SECURITY: {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512",
"username", "password", "cafile"}; the Java ones read the same as client
properties from the file EOS_CLIENT_PROPERTIES names. Needs confluent-kafka
(conformance/needs.py).
"""
import json
import os

from certs import make_certs

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USER, PASSWORD = "eos-client", "eos-client-secret"


class Security:
    def __init__(self, directory, user=USER, password=PASSWORD):
        certs = os.path.join(directory, "certs")
        os.makedirs(certs, exist_ok=True)
        self.keystore, self.cafile = make_certs(certs)
        self.user, self.password = user, password
        self.principal = "User:" + user
        self.settings = {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": self.keystore,
            "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
        self.client_json = json.dumps({"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": user,
                                       "password": password, "cafile": self.cafile})
        self.client_properties = os.path.join(certs, "client.properties")    # the same, for Java clients
        with open(self.client_properties, "w") as f:
            f.write("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password}";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={self.cafile}\n")

    @property
    def env(self):
        """What the client under test is started with: EOS_SECURITY (JSON) and
        EOS_CLIENT_PROPERTIES (a Kafka client properties file, read by the Java ones)."""
        return {"EOS_SECURITY": self.client_json, "EOS_CLIENT_PROPERTIES": self.client_properties}

    def add_user(self, bootstrap):
        """The client's SCRAM-SHA-512 credential (AlterUserScramCredentials)."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, \
            UserScramCredentialUpsertion
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                self.user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), self.password.encode())]).values():
            f.result(30)

    def grant(self, bootstrap, grants):
        """ALLOW ACLs for the client: grants are (resource type, name, pattern type,
        operation), in the names of confluent_kafka.admin's enums ("TOPIC", "LITERAL", "READ")."""
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
            ResourcePatternType, ResourceType
        admin = AdminClient({"bootstrap.servers": bootstrap})
        bindings = [AclBinding(ResourceType[rt], name, ResourcePatternType[pt], self.principal, "*",
                               AclOperation[op], AclPermissionType.ALLOW) for rt, name, pt, op in grants]
        for f in admin.create_acls(bindings).values():
            f.result(30)
